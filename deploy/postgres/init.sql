-- Run once by the postgres image when its volume is new (docker-compose.yml mounts this file in
-- /docker-entrypoint-initdb.d). The application role needs a password to log in over the
-- compose network; migration 0001 finds the role already made and leaves it be. Change both
-- passwords (here and in docker-compose.yml) for anything but a trial.
CREATE ROLE shoebox_app LOGIN PASSWORD 'shoebox_app';
