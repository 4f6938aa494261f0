#!/usr/bin/env bash
# Submits a pail run to Hugging Face Jobs with the `hf jobs run` CLI
# (huggingface_hub): a relay Job, a trainer Job and N rollout Jobs (+ an eval
# Job), all in one network group so the others reach the relay at
# https://${HF_NETWORK_GROUP_PREFIX}relay:PORT. Or, with PAIL_HF_ENDPOINT, no
# relay Job: every Job uses a relay you run on any host they can reach.
# Makes the run's relay keys and CA in $PAIL_HF_STATE (mode 700) and passes them
# as Job secrets (`--secrets NAME`: the values never appear on a command line).
#
# Usage: PAIL_HF_IMAGE=IMAGE PAIL_HF_MODEL=hf://ORG/NAME hf-jobs/submit.sh [--dry-run]
#   --dry-run   print the exact `hf jobs run` commands, one per line, shell-quoted; submit nothing
#
# Environment (defaults in brackets):
#   PAIL_HF_IMAGE            image built from hf-jobs/Dockerfile and pushed   [required]
#   PAIL_HF_MODEL            model volume, mounted read-only at /model: hf://[models/]ORG/NAME [required
#                            unless PAIL_MODEL names a folder in the image]
#   PAIL_HF_DATASET          dataset volume mounted at /dataset: hf://datasets/ORG/NAME []
#   PAIL_DATASET             training prompts inside the Jobs, e.g. /dataset/train.jsonl with
#                            PAIL_HF_DATASET, or the demo's /opt/pail/data/addition/train.jsonl [required]
#   PAIL_EVAL_DATASET        held-out prompts: adds an eval Job              []
#   PAIL_RUN                 run name (bucket prefix)                         [grpo-YYYYmmdd-HHMMSS]
#   PAIL_TASK_ARGS           the task's grpo-rollout flags, for the rollout and eval Jobs alike:
#                            reward, --chat, --env..., e.g. "--reward cmd --reward-cmd
#                            'python3 /opt/pail/data/rewards/digit_match.py'" (the image has python3) []
#   PAIL_STEPS [200]  PAIL_GROUP_SIZE [8]  PAIL_TRAIN_ARGS  PAIL_ROLLOUT_ARGS  PAIL_EVAL_ARGS  PAIL_RELAY_ARGS
#   PAIL_HF_ROLLOUT_JOBS     rollout Jobs                                     [2]
#   PAIL_HF_RELAY_FLAVOR [cpu-upgrade]  PAIL_HF_TRAINER_FLAVOR [cpu-xl]  PAIL_HF_ROLLOUT_FLAVOR [cpu-xl]
#                            (CPU flavors: this release computes on the CPU; a GPU flavor would sit idle)
#   PAIL_HF_EVAL_FLAVOR [cpu-upgrade]   PAIL_HF_TIMEOUT [4h]  PAIL_HF_NAMESPACE []  PAIL_HF_NETWORK_GROUP [pail-<run>]
#   PAIL_RELAY_PORT          the relay's port in the network group           [9000]
#   PAIL_UPSTREAM            s3://bucket/prefix the relay serves (its AWS_ACCESS_KEY_ID and
#                            AWS_SECRET_ACCESS_KEY are passed as secrets; AWS_ENDPOINT_URL as env)
#                            [none: the relay Job's own disk, lost when it ends]
#   PAIL_HF_ENDPOINT         https URL of a relay you run yourself: no relay Job, no network group
#   PAIL_HF_CA_FILE          with PAIL_HF_ENDPOINT: the CA (PEM) of that relay's certificate
#   PAIL_TRAINER_KEY, PAIL_ROLLOUT_KEY, PAIL_OPERATOR_KEY  "ACCESS_KEY_ID SECRET" of your relay's
#                            keys (needed with PAIL_HF_ENDPOINT; otherwise made here)
#   PAIL_HF_STATE            local folder for the run's keys and CA       [./pail-hf-<run>]
#   HF                       the hf CLI                                    [hf]
set -uo pipefail
die() { echo "hf-jobs/submit.sh: $*" >&2; exit "${2:-2}"; }
DRY=0
for a in "$@"; do
  case "$a" in --dry-run) DRY=1 ;; -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$a' (only --dry-run)" ;; esac
done
HF=${HF:-hf}
IMAGE=${PAIL_HF_IMAGE:-}
RUN=${PAIL_RUN:-grpo-$(date -u +%Y%m%d-%H%M%S)}
STEPS=${PAIL_STEPS:-200}
GROUP=${PAIL_GROUP_SIZE:-8}
NROLL=${PAIL_HF_ROLLOUT_JOBS:-2}
PORT=${PAIL_RELAY_PORT:-9000}
TIMEOUT=${PAIL_HF_TIMEOUT:-4h}
DATASET=${PAIL_DATASET:-}
STATE=${PAIL_HF_STATE:-./pail-hf-$RUN}
[ -n "$IMAGE" ] || die "PAIL_HF_IMAGE is not set: the image built from hf-jobs/Dockerfile (docker build -f hf-jobs/Dockerfile .)"
[[ "$RUN" =~ ^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$ ]] || die "PAIL_RUN '$RUN': use [A-Za-z0-9_.-] and /"
[ -n "$DATASET" ] || die "PAIL_DATASET is not set: the training prompts as the Jobs see them (/dataset/FILE with PAIL_HF_DATASET, or the demo's /opt/pail/data/addition/train.jsonl)"
for v in STEPS GROUP NROLL PORT; do [[ "${!v}" =~ ^[0-9]+$ ]] || die "$v='${!v}' is not a whole number"; done
[ "$NROLL" -ge 1 ] || die "PAIL_HF_ROLLOUT_JOBS must be at least 1"
[[ "$TIMEOUT" =~ ^[0-9]+(\.[0-9]+)?[smhd]?$ ]] || die "PAIL_HF_TIMEOUT '$TIMEOUT': want a number with s, m, h or d"
GROUPNAME=${PAIL_HF_NETWORK_GROUP:-pail-$(tr 'A-Z' 'a-z' <<<"$RUN" | tr -c 'a-z0-9\n' - | cut -c1-41)}
[[ "$GROUPNAME" =~ ^[a-z0-9-]{1,46}$ ]] || die "PAIL_HF_NETWORK_GROUP '$GROUPNAME': lowercase alphanumerics and dashes, 46 at most"
vol_model=()
if [ -n "${PAIL_HF_MODEL:-}" ]; then
  [[ "$PAIL_HF_MODEL" == hf://* ]] || die "PAIL_HF_MODEL '$PAIL_HF_MODEL': want hf://[models/]ORG/NAME"
  vol_model=(-v "$PAIL_HF_MODEL:/model:ro"); MODEL=/model
else
  [ -n "${PAIL_MODEL:-}" ] || die "set PAIL_HF_MODEL (hf://ORG/NAME, mounted at /model) or PAIL_MODEL (a folder in the image)"
  MODEL=$PAIL_MODEL
fi
vol_data=()
if [ -n "${PAIL_HF_DATASET:-}" ]; then
  [[ "$PAIL_HF_DATASET" == hf://datasets/* ]] || die "PAIL_HF_DATASET '$PAIL_HF_DATASET': want hf://datasets/ORG/NAME"
  vol_data=(-v "$PAIL_HF_DATASET:/dataset:ro")
fi

# --- the run's keys and CA (kept in $STATE, reused by a second call) ---------
if [ $DRY = 1 ] && [ -z "${PAIL_HF_STATE:-}" ]; then STATE=$(mktemp -d); trap 'rm -rf "$STATE"' EXIT; fi
mkdir -p "$STATE" && chmod 700 "$STATE" || die "PAIL_HF_STATE $STATE: cannot create" 1
rnd() { head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
for r in TRAINER ROLLOUT OPERATOR; do
  n=PAIL_${r}_KEY
  if [ -z "${!n:-}" ]; then
    [ -z "${PAIL_HF_ENDPOINT:-}" ] || die "$n is not set: with PAIL_HF_ENDPOINT give the keys your relay knows"
    f=$STATE/$(tr A-Z a-z <<<"$r").key
    [ -f "$f" ] || ( umask 077; printf 'pail-%s-%s %s\n' "$(tr A-Z a-z <<<"$r")" "$(rnd | cut -c1-10)" "$(rnd)" >"$f" )
    printf -v "$n" '%s' "$(cat "$f")"
  fi
  export "${n?}"
done
if [ -n "${PAIL_HF_ENDPOINT:-}" ]; then
  [[ "$PAIL_HF_ENDPOINT" == https://* ]] || die "PAIL_HF_ENDPOINT '$PAIL_HF_ENDPOINT': want https://HOST:PORT"
  [ -f "${PAIL_HF_CA_FILE:-}" ] || die "PAIL_HF_CA_FILE must name the PEM CA of the relay at $PAIL_HF_ENDPOINT"
  CA_FILE=$PAIL_HF_CA_FILE
else
  CA_FILE=$STATE/ca.pem
  if [ ! -f "$CA_FILE" ]; then
    ( umask 077; openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
        -keyout "$STATE/ca.key" -out "$CA_FILE" -subj "/CN=pail-$GROUPNAME-ca" >/dev/null 2>&1 ) \
      || die "openssl could not make a CA in $STATE" 1
  fi
  PAIL_CA_KEY=$(base64 -w0 <"$STATE/ca.key"); export PAIL_CA_KEY
fi
CA_B64=$(base64 -w0 <"$CA_FILE")

# --- the commands --------------------------------------------------------------
common=(--detach --timeout "$TIMEOUT" --label "pail-run=$GROUPNAME")
[ -z "${PAIL_HF_NAMESPACE:-}" ] || common+=(--namespace "$PAIL_HF_NAMESPACE")
env_common=(-e "PAIL_RUN=$RUN" -e "PAIL_GROUP_SIZE=$GROUP" -e "PAIL_CA_CERT=$CA_B64" -e "PAIL_RELAY_PORT=$PORT")
if [ -n "${PAIL_HF_ENDPOINT:-}" ]; then env_common+=(-e "PAIL_ENDPOINT=$PAIL_HF_ENDPOINT"); net=()
else net=(--network-group "$GROUPNAME"); fi
ENTRY=/opt/pail/hf-jobs/entrypoint.sh
CMDS=()
add() { local q; printf -v q '%q ' "$@"; CMDS+=("${q% }"); }

if [ -z "${PAIL_HF_ENDPOINT:-}" ]; then
  relay_env=(); relay_sec=(--secrets PAIL_TRAINER_KEY --secrets PAIL_ROLLOUT_KEY --secrets PAIL_OPERATOR_KEY --secrets PAIL_CA_KEY)
  if [ -n "${PAIL_UPSTREAM:-}" ]; then
    [[ "$PAIL_UPSTREAM" == s3://* ]] || die "PAIL_UPSTREAM '$PAIL_UPSTREAM': want s3://bucket/prefix"
    relay_env+=(-e "PAIL_UPSTREAM=$PAIL_UPSTREAM")
    [ -z "${AWS_ENDPOINT_URL:-}" ] || relay_env+=(-e "AWS_ENDPOINT_URL=$AWS_ENDPOINT_URL")
    [ -z "${AWS_REGION:-}" ] || relay_env+=(-e "AWS_REGION=$AWS_REGION")
    relay_sec+=(--secrets AWS_ACCESS_KEY_ID --secrets AWS_SECRET_ACCESS_KEY)
  fi
  [ -z "${PAIL_RELAY_ARGS:-}" ] || relay_env+=(-e "PAIL_RELAY_ARGS=$PAIL_RELAY_ARGS")
  add "$HF" jobs run "${common[@]}" --name "pail-relay-$GROUPNAME" --flavor "${PAIL_HF_RELAY_FLAVOR:-cpu-upgrade}" \
    "${net[@]}" --network-alias relay "${env_common[@]}" "${relay_env[@]}" "${relay_sec[@]}" "$IMAGE" "$ENTRY" relay
fi
train_env=(-e "PAIL_MODEL=$MODEL" -e "PAIL_STEPS=$STEPS")
[ -z "${PAIL_TRAIN_ARGS:-}" ] || train_env+=(-e "PAIL_TRAIN_ARGS=$PAIL_TRAIN_ARGS")
add "$HF" jobs run "${common[@]}" --name "pail-trainer-$GROUPNAME" --flavor "${PAIL_HF_TRAINER_FLAVOR:-cpu-xl}" \
  "${net[@]}" "${vol_model[@]}" "${env_common[@]}" "${train_env[@]}" --secrets PAIL_TRAINER_KEY --secrets PAIL_OPERATOR_KEY \
  "$IMAGE" "$ENTRY" trainer
for i in $(seq 0 $((NROLL - 1))); do
  roll_env=(-e "PAIL_MODEL=$MODEL" -e "PAIL_DATASET=$DATASET" -e "PAIL_WORKER_ID=hf-$GROUPNAME-r$i")
  [ -z "${PAIL_TASK_ARGS:-}" ] || roll_env+=(-e "PAIL_TASK_ARGS=$PAIL_TASK_ARGS")
  [ -z "${PAIL_ROLLOUT_ARGS:-}" ] || roll_env+=(-e "PAIL_ROLLOUT_ARGS=$PAIL_ROLLOUT_ARGS")
  add "$HF" jobs run "${common[@]}" --name "pail-rollout-$i-$GROUPNAME" --flavor "${PAIL_HF_ROLLOUT_FLAVOR:-cpu-xl}" \
    "${net[@]}" "${vol_model[@]}" "${vol_data[@]}" "${env_common[@]}" "${roll_env[@]}" --secrets PAIL_ROLLOUT_KEY \
    "$IMAGE" "$ENTRY" rollout
done
if [ -n "${PAIL_EVAL_DATASET:-}" ]; then
  eval_env=(-e "PAIL_MODEL=$MODEL" -e "PAIL_EVAL_DATASET=$PAIL_EVAL_DATASET" -e "PAIL_WORKER_ID=hf-$GROUPNAME-eval")
  [ -z "${PAIL_TASK_ARGS:-}" ] || eval_env+=(-e "PAIL_TASK_ARGS=$PAIL_TASK_ARGS")
  [ -z "${PAIL_EVAL_ARGS:-}" ] || eval_env+=(-e "PAIL_EVAL_ARGS=$PAIL_EVAL_ARGS")
  add "$HF" jobs run "${common[@]}" --name "pail-eval-$GROUPNAME" --flavor "${PAIL_HF_EVAL_FLAVOR:-cpu-upgrade}" \
    "${net[@]}" "${vol_model[@]}" "${vol_data[@]}" "${env_common[@]}" "${eval_env[@]}" --secrets PAIL_ROLLOUT_KEY \
    "$IMAGE" "$ENTRY" eval
fi

if [ $DRY = 1 ]; then printf '%s\n' "${CMDS[@]}"; exit 0; fi
command -v "$HF" >/dev/null || die "the hf CLI ($HF) is not installed: pip install huggingface_hub" 1
echo "run $RUN: ${#CMDS[@]} Jobs in network group $GROUPNAME; keys and CA in $STATE" >&2
for c in "${CMDS[@]}"; do
  echo "+ $c" >&2
  eval "$c" || die "a Job did not start (see above); cancel the others with: $HF jobs ps, $HF jobs cancel ID" 1
done
echo "follow with: $HF jobs ps --label pail-run=$GROUPNAME; $HF jobs logs ID" >&2
