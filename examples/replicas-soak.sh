#!/bin/sh
# The replica crash tests (examples/tests/replicas_crash.rs) over many seeds: three `shop`
# replicas on Postgres and on Redis, on Telegram webhooks and long polling, SIGKILLed three
# times per seed. CI runs one seed per case; this runs SEEDS (default 0..20), e.g.
#   SEEDS=0..100 examples/replicas-soak.sh
# It needs the servers: BOTMESH_TEST_POSTGRES_URL and BOTMESH_TEST_REDIS_URL.
set -eu
cd "$(dirname "$0")/.."
: "${BOTMESH_TEST_POSTGRES_URL:?set it, e.g. postgres://postgres@127.0.0.1:5432/test}"
: "${BOTMESH_TEST_REDIS_URL:?set it, e.g. redis://127.0.0.1:6379/}"
SEEDS="${SEEDS:-0..20}" exec cargo test -p botmesh-examples \
    --features telegram,postgres,redis --test integration replicas_crash:: -- --nocapture
