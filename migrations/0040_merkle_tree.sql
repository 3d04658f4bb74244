-- The log's RFC 6962 Merkle tree (docs/verification.md, "Proving one round"): only finished
-- nodes are stored. Node (level, idx) covers leaves [idx * 2^level, (idx + 1) * 2^level), leaf
-- i being the canonical bytes of the event at position i + 1, and exists once all of them do,
-- so a node is written once and never changes. The tree's size is the number of leaves, found
-- through the primary key as the last level-0 index plus one.
CREATE TABLE merkle_nodes (
    level smallint NOT NULL CHECK (level BETWEEN 0 AND 63),
    idx   bigint   NOT NULL CHECK (idx >= 0),
    hash  bytea    NOT NULL CHECK (octet_length(hash) = 32),
    PRIMARY KEY (level, idx)
);

CREATE FUNCTION merkle_nodes_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'merkle_nodes is append-only: % is not allowed', TG_OP
        USING HINT = 'A finished node never changes; a wrong one is evidence, not a typo.';
END
$$;

CREATE TRIGGER merkle_nodes_no_update_or_delete
    BEFORE UPDATE OR DELETE ON merkle_nodes
    FOR EACH STATEMENT EXECUTE FUNCTION merkle_nodes_refuse_change();

CREATE TRIGGER merkle_nodes_no_truncate
    BEFORE TRUNCATE ON merkle_nodes
    FOR EACH STATEMENT EXECUTE FUNCTION merkle_nodes_refuse_change();

-- Adds the nodes finished by leaves [size_before, size_before + leaves). Integrators may race
-- (any worker may run the checkpoint job): the advisory lock makes them take turns, and one
-- that integrated from a size the tree has already passed is refused (SB010) instead of
-- colliding with the nodes the winner wrote. Level-0 nodes must be exactly the new leaves.
CREATE FUNCTION merkle_add_nodes(
    size_before bigint, leaves bigint, levels smallint[], idxs bigint[], hashes bytea[]
) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    current_size bigint;
    new_leaves bigint;
    stray bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('shoebox:merkle_nodes'));
    SELECT coalesce(max(n.idx) + 1, 0) INTO current_size
        FROM public.merkle_nodes AS n WHERE n.level = 0;
    IF current_size <> size_before THEN
        RAISE EXCEPTION 'the tree has % leaves, not %', current_size, size_before
            USING ERRCODE = 'SB010';
    END IF;
    SELECT count(*) FILTER (WHERE u.idx >= size_before AND u.idx < size_before + leaves),
           count(*) FILTER (WHERE u.idx < size_before OR u.idx >= size_before + leaves)
        INTO new_leaves, stray
        FROM unnest(levels, idxs) AS u(level, idx) WHERE u.level = 0;
    IF new_leaves <> leaves OR stray <> 0 OR leaves < 1 THEN
        RAISE EXCEPTION 'the batch does not hold exactly leaves % to %',
            size_before, size_before + leaves - 1 USING ERRCODE = 'SB010';
    END IF;
    INSERT INTO public.merkle_nodes (level, idx, hash)
        SELECT * FROM unnest(levels, idxs, hashes);
END
$$;

REVOKE ALL ON merkle_nodes FROM PUBLIC;
GRANT SELECT ON merkle_nodes TO shoebox_app;
REVOKE ALL ON FUNCTION merkle_add_nodes(bigint, bigint, smallint[], bigint[], bytea[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION merkle_add_nodes(bigint, bigint, smallint[], bigint[], bytea[])
    TO shoebox_app;

-- A round's proof names the tree checkpoint of a given size.
CREATE INDEX events_tree_checkpoint_size ON events (((payload ->> 'size')::bigint))
    WHERE type = 'TreeCheckpointSigned';
