#!/usr/bin/env bash
# `make demo`: the local async GRPO run (relay + trainer + two rollout workers on
# a local folder). Not built yet: it says so instead of pretending.
echo "demo: not implemented yet: the local GRPO demo needs grpo-train, grpo-rollout and grpo-relay," >&2
echo "demo: which are not built in this version of pail (see README.md, Status)" >&2
exit 1
