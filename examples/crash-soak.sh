#!/bin/sh
# The channel crash tests (examples/tests/channel_crash.rs) over many seeds: the shop on
# Telegram (long polling and webhook), WhatsApp Cloud and Twilio, SIGKILLed twice at seeded
# moments per seed. CI runs two seeds per channel; this runs SEEDS (default 0..50), e.g.
#   SEEDS=0..200 examples/crash-soak.sh
# A loaded machine finds more crash windows: `taskset -c 0 examples/crash-soak.sh`.
set -eu
cd "$(dirname "$0")/.."
SEEDS="${SEEDS:-0..50}" exec cargo test -p botmesh-examples \
    --features telegram,whatsapp-cloud,twilio --test integration \
    -- survives_sigkills --nocapture
