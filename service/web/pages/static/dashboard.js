// The ops dashboard: every table from the read models, refreshed as the feed says things
// happened; actions (with a reason) go through this page's own server, which holds the key.
import { api, element, pounds, secondsLeft } from "./common.js";
import { drawRoads } from "./roads.js";

const root = document.getElementById("dashboard");
const readOnly = root.dataset.role !== "ops";
const $ = (id) => document.getElementById(id);
const latest = new Map(); // table id -> the latest coup seen on the feed
const windowsCloseAt = new Map();
let pending = null;
let seen = 0; // the newest log position the feed has shown this page

function percent(value) {
  return value === null || value === undefined ? "—" : `${(value * 100).toFixed(3)}%`;
}

// Inputs of type datetime-local hold no zone; the dashboard's are UTC, as their labels say.
function utcInstant(local) {
  if (!local) return undefined;
  const parsed = new Date(`${local}Z`);
  return Number.isNaN(parsed.getTime()) ? local : parsed.toISOString();
}

function actionForm(tableId, kind, label, fields) {
  const form = element("form", undefined, { class: "action", "data-action": kind, "data-table": tableId });
  const title = element("h4", label);
  form.appendChild(title);
  for (const [name, text, type] of fields) {
    const id = `${kind}-${name}-${tableId}`;
    const input = element("input", undefined, { id, name, autocomplete: "off", type: type ?? "text" });
    if (type === "datetime-local") input.step = "1";
    input.required = name === "reason" || (kind === "unmutes" && name === "player_id");
    form.append(element("label", text, { for: id }), input);
  }
  form.appendChild(element("button", label, { type: "submit" }));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const data = Object.fromEntries(new FormData(form));
    const body = {};
    if (data.reason !== undefined) body.reason = data.reason;
    if (data.player_id) body.player_id = data.player_id;
    if (data.round_ids) body.round_ids = data.round_ids.split(/[\s,]+/).filter(Boolean);
    if (data.from) body.from = utcInstant(data.from);
    if (data.to) body.to = utcInstant(data.to);
    const answer = await api("POST", `/dashboard/api/tables/${encodeURIComponent(tableId)}/${kind}`, body);
    $("action-message").textContent = answer.ok
      ? `${label}: done at ${tableId}.`
      : `${label} refused: ${answer.body?.detail ?? answer.status}`;
    if (answer.ok) {
      for (const input of form.querySelectorAll("input")) input.value = "";
    }
    refreshSoon(0);
  });
  return form;
}

function coupText(coup) {
  return coup ? `${coup.round_id}: ${coup.outcome} (P ${coup.player_total}, B ${coup.banker_total})` : "—";
}

function drawTable(table) {
  const section = element("section", undefined, { class: "panel table", id: `table-${table.table_id}`, "aria-label": `Table ${table.table_id}` });
  section.appendChild(element("h2", `Table ${table.table_id}`));
  const figures = element("dl", undefined, { class: "figures" });
  const players = table.seats.filter((s) => s.player_id).map((s) => `${s.seat}: ${s.player_id}`).join(", ") || "none";
  windowsCloseAt.set(table.table_id, table.phase === "betting" ? table.window_closes_at : null);
  // The feed's coup is newer than the read model's until the projector has applied it.
  const coup = latest.get(table.table_id) ?? table.latest_coup;
  for (const [term, value, id] of [
    ["Phase", table.suspended ? `${table.phase}, suspended by a malfunction` : table.phase, "phase"],
    ["Round", table.round_id ?? "—", "round"],
    ["Players", players, "players"],
    ["Shoe", table.shoe ? `${table.shoe.shoe_id}, ${table.shoe.hands_left} hands left` : "none open", "shoe"],
    ["Window", "", "window"],
    ["Latest coup", coupText(coup), "latest"],
    ["Rounds a minute", table.rounds_last_minute, "rate"],
  ]) {
    figures.append(element("dt", term), element("dd", value, { "data-field": id }));
  }
  section.appendChild(figures);

  const counts = table.roads.counts;
  section.appendChild(element("p", `Banker ${counts.banker} · Player ${counts.player} · Ties ${counts.ties} · Hands ${counts.hands}`, { class: "counts" }));
  const roads = element("div", undefined, { class: "roads" });
  drawRoads(roads, table.roads);
  section.appendChild(roads);

  const ledger = element("table", undefined, { class: "ledger" });
  ledger.appendChild(element("caption", "House ledger (last 30 days): return to player, observed beside the exact theory"));
  const head = element("tr");
  for (const title of ["Spot", "Bets", "Wagered", "Paid out", "Hold", "Observed RTP", "Theory RTP"]) head.appendChild(element("th", title, { scope: "col" }));
  ledger.appendChild(head);
  for (const line of table.ledger) {
    const row = element("tr", undefined, { "data-spot": line.spot });
    for (const value of [line.spot, line.bets, pounds(line.wagered_pence), pounds(line.paid_out_pence), pounds(line.hold_pence), percent(line.observed_rtp), percent(line.theoretical_rtp)]) {
      row.appendChild(element("td", value));
    }
    ledger.appendChild(row);
  }
  section.appendChild(ledger);

  if (!readOnly) {
    const actions = element("div", undefined, { class: "actions" });
    actions.append(
      actionForm(table.table_id, "malfunctions", "Declare a malfunction", [
        ["reason", "Reason"],
        ["round_ids", "Rounds (blank: the current round)"],
        ["from", "Or every round opened from (UTC)", "datetime-local"],
        ["to", "to (UTC, inclusive)", "datetime-local"],
      ]),
      actionForm(table.table_id, "mutes", "Mute a chat player", [["player_id", "Player"], ["reason", "Reason"]]),
      actionForm(table.table_id, "unmutes", "Unmute a chat player", [["player_id", "Player"]]),
      actionForm(table.table_id, "reopenings", "Reopen the table", [["reason", "Reason"]]),
    );
    section.appendChild(actions);
  }
  return section;
}

function drawQueues(queues) {
  const warning = $("queue-warning");
  if (!queues) {
    $("queue").textContent = "no queue (Redis not configured or unreachable)";
    warning.textContent = "";
    return;
  }
  $("queue").textContent = queues
    .map((q) => `${q.queue}: ${q.jobs} jobs waiting, ${q.deadlines} window deadlines on the timer (${q.overdue} overdue), ${q.workers} live ${q.workers === 1 ? "worker" : "workers"}`)
    .join(" · ");
  // Work waiting with nobody to do it first: that is the one to act on.
  const warnings = [...queues].sort((a, b) => b.unconsumed - a.unconsumed).map((q) => q.warning).filter(Boolean);
  warning.textContent = warnings.join(" ");
  warning.dataset.unconsumed = String(queues.some((q) => q.unconsumed));
}

async function refresh() {
  pending = null;
  const answer = await api("GET", "/dashboard/api/overview");
  if (!answer.ok) {
    $("action-message").textContent = answer.body?.detail ?? `The server answered ${answer.status}.`;
    return;
  }
  const overview = answer.body;
  const tables = $("tables");
  // The tables are drawn afresh at every refresh (each feed event asks for one): what an
  // operator is typing into a form, and where the cursor is, must survive it.
  const typed = new Map([...tables.querySelectorAll("input")].map((input) => [input.id, input.value]));
  const focused = document.activeElement?.id;
  tables.replaceChildren(...overview.tables.map(drawTable));
  for (const [id, value] of typed) {
    const input = document.getElementById(id);
    if (input && value) input.value = value;
  }
  if (focused) document.getElementById(focused)?.focus();
  const lag = overview.projections?.projections ?? [];
  $("lag").textContent = lag.length ? lag.map((p) => `${p.name} ${p.lag_events} events`).join(", ") : "—";
  drawQueues(overview.queues);
  // Why bets may be refused with log-busy: the sequencer is behind, or none is running.
  const sequencer = overview.sequencer;
  $("sequencer").textContent = sequencer
    ? `${sequencer.unsequenced_appends} appends waiting (at most), oldest ${sequencer.oldest_seconds} s` +
      (sequencer.busy ? " · BEHIND: appends refused (log-busy)" : "")
    : "—";
  $("rate").textContent = overview.tables.reduce((sum, t) => sum + t.rounds_last_minute, 0);
  const list = $("significant");
  list.replaceChildren();
  for (const event of overview.significant_events) {
    list.appendChild(element("li", `${event.when} · ${event.kind} · ${event.type} · ${event.who} (${event.role})${event.why ? ` · why: ${event.why}` : ""}`, { "data-type": event.type }));
  }
  root.dataset.ready = "true";
  // The overview is a read model, a moment behind the log and the feed: until it has read as
  // far as both, look again shortly (at most twice a second, whatever the load).
  const model = lag.find((p) => p.name === "overview");
  if (model && (model.lag_events > 0 || model.checkpoint < seen)) refreshSoon(500);
}

function noteSeen(message) {
  const position = Number(message.lastEventId);
  if (Number.isFinite(position) && position > seen) seen = position;
}

function refreshSoon(delay = 300) {
  if (pending) return;
  pending = setTimeout(refresh, delay);
}

function follow() {
  const feed = new EventSource("/dashboard/api/feed");
  feed.onopen = () => {
    $("feed-status").textContent = "live";
    refreshSoon(0);
  };
  feed.onerror = () => { $("feed-status").textContent = "reconnecting"; };
  feed.addEventListener("projection-lag", (e) => {
    const lag = JSON.parse(e.data);
    const entries = lag.projections ?? lag.read_models ?? [];
    if (Array.isArray(entries) && entries.length) {
      $("lag").textContent = entries.map((p) => `${p.name} ${p.lag_events} events`).join(", ");
    }
  });
  feed.addEventListener("CoupCompleted", (e) => {
    noteSeen(e);
    const event = JSON.parse(e.data);
    latest.set(event.table_id, event.payload);
    const cell = document.querySelector(`#table-${CSS.escape(event.table_id)} [data-field="latest"]`);
    if (cell) cell.textContent = `${event.payload.round_id}: ${event.payload.outcome} (P ${event.payload.player_total}, B ${event.payload.banker_total})`;
    refreshSoon();
  });
  feed.onmessage = (e) => { noteSeen(e); refreshSoon(); };
  for (const type of ["RoundOpened", "RoundSettled", "RoundVoided", "PlayerSat", "PlayerChangedSeat", "PlayerLeft", "BetPlaced", "MalfunctionDeclared", "TableSuspended", "TableReopened", "PlayerMuted", "PlayerUnmuted", "ShoeOpened", "TableCreated"]) {
    feed.addEventListener(type, (e) => { noteSeen(e); refreshSoon(); });
  }
}

setInterval(() => {
  for (const [tableId, closesAt] of windowsCloseAt) {
    const cell = document.querySelector(`#table-${CSS.escape(tableId)} [data-field="window"]`);
    const left = secondsLeft(closesAt);
    if (cell) cell.textContent = left === null ? "closed" : `${left} s left`;
  }
}, 250);

refresh().then(follow);
