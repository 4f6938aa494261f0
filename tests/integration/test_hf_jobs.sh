#!/usr/bin/env bash
# hf-jobs/: HF Jobs cannot be reached from here, so
#   1. hf-jobs/submit.sh --dry-run prints the exact `hf jobs run` commands; each
#      is run through the real CLI (huggingface_hub's `hf` in the project venv)
#      with its own --dry-run, offline: the parser must accept it and resolve the
#      image, flavor, network group/alias, env, secrets and volumes we meant;
#      flavors are checked against the CLI's JobHardware list (its --dry-run
#      does not check them); a misspelt option (which the CLI takes for the
#      image) must fail the check;
#   2. the Jobs' environment and secrets taken from those commands run
#      hf-jobs/entrypoint.sh relay / trainer / rollout x2 / eval here on loopback
#      (no container): the run completes and every role exits 0; the rollout
#      Jobs score with the Python reward of doc/rewards.md, given once in
#      PAIL_TASK_ARGS and quoted as a user would, and so does the eval Job;
#   3. the Dockerfile installs a package for every library the executables need,
#      and python3 for Python rewards and environments.
source "$(dirname "$0")/lib.sh"
trap '[ -z "${PAIL_TEST_KEEP:-}" ] || cp -a "$WORK" "$PAIL_TEST_KEEP"; cleanup' EXIT
HFBIN=$(venv)/bin/hf
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 HF_HOME=$WORK/hf-home NO_COLOR=1
[ -x "$HFBIN" ] || { bad "the venv has no hf CLI ($HFBIN): validation/requirements.txt needs huggingface_hub"; finish; exit 1; }
SUBMIT=$ROOT/hf-jobs/submit.sh
ENTRY=/opt/pail/hf-jobs/entrypoint.sh
echo "  hf CLI: huggingface_hub $("$(venv)/bin/python" -c 'import huggingface_hub as h; print(h.__version__)')"

# --- 1. the printed commands against the real CLI ------------------------------
export PAIL_HF_IMAGE=registry.example/pail:test PAIL_HF_MODEL=hf://Qwen/Qwen3-0.6B PAIL_RUN=ci-run
export PAIL_HF_STATE=$WORK/state PAIL_EVAL_DATASET=/opt/pail/data/addition/eval.jsonl PAIL_HF_ROLLOUT_JOBS=2
export PAIL_HF_DATASET=hf://datasets/org/prompts PAIL_DATASET=/dataset/train.jsonl PAIL_STEPS=7
export PAIL_TRAIN_ARGS="--lr 1e-5 --groups-per-step 32" PAIL_UPSTREAM=s3://my-bucket/pail AWS_ACCESS_KEY_ID=AKIAEXAMPLE
export AWS_SECRET_ACCESS_KEY=example-secret HF=hf
# The task's flags, once for the rollout and eval Jobs: the docs' Python reward.
TASK_ARGS="--reward exact_answer --reward cmd:0.5 --reward-cmd 'python3 /opt/pail/data/rewards/digit_match.py'"
export PAIL_TASK_ARGS=$TASK_ARGS
check "submit.sh --dry-run prints the commands" bash -c "'$SUBMIT' --dry-run >'$WORK/cmds.txt'"
check "five Jobs: relay, trainer, 2 rollout, eval" test "$(grep -c '^hf jobs run ' "$WORK/cmds.txt")" = 5
check "no secret value is printed (only secret names)" \
  bash -c "! grep -qF -e \"\$(cut -d' ' -f2 '$WORK/state/trainer.key')\" -e example-secret -e PRIVATE '$WORK/cmds.txt' && ! grep -q \"\$(base64 -w0 '$WORK/state/ca.key' | cut -c1-60)\" '$WORK/cmds.txt'"
FLAVORS=" $("$(venv)/bin/python" -c 'from huggingface_hub import JobHardware; print(" ".join(h.value for h in JobHardware))') "
# The secrets the Jobs read from the environment (--secrets NAME).
for r in trainer rollout operator; do export "PAIL_$(tr a-z A-Z <<<$r)_KEY=$(cat "$WORK/state/$r.key")"; done
export PAIL_CA_KEY; PAIL_CA_KEY=$(base64 -w0 <"$WORK/state/ca.key")
CA_B64=$(base64 -w0 <"$WORK/state/ca.pem")

# resolve LINE: what the real CLI would send to HfApi.run_job for this command
# (validation/hf_jobs/resolve.py: its parser and option handling, run_job recorded).
resolve() { local -a c; eval "c=($1)"; HF_TOKEN=hf_pailtestnotarealtoken0000000000 "$(venv)/bin/python" \
  "$ROOT/validation/hf_jobs/resolve.py" "${c[@]}" 2>"$WORK/resolve.err" | tail -1; }
expect_role() {  # expect_role N ROLE FLAVOR: the Nth command resolves to ROLE's Job
  local line; line=$(sed -n "${1}p" "$WORK/cmds.txt")
  resolve "$line" >"$WORK/res-$1.json" || { cat "$WORK/resolve.err" >&2; return 1; }
  ROLE=$2 FLAVOR=$3 CA_B64=$CA_B64 ENTRY=$ENTRY FLAVORS=$FLAVORS "$(venv)/bin/python" - "$WORK/res-$1.json" <<'PY'
import json, os, sys
j = json.load(open(sys.argv[1]))["run_job"]
role, env, sec = os.environ["ROLE"], j["env"], j["secrets"]
want = {"image": "registry.example/pail:test", "command": [os.environ["ENTRY"], role], "flavor": os.environ["FLAVOR"],
        "timeout": "4h", "network_group": "pail-ci-run"}
bad = [f"{k}: {j.get(k)!r}, want {v!r}" for k, v in want.items() if j.get(k) != v]
env_want = {"PAIL_RUN": "ci-run", "PAIL_GROUP_SIZE": "8", "PAIL_RELAY_PORT": "9000", "PAIL_CA_CERT": os.environ["CA_B64"]}
keys = {"relay": ["PAIL_TRAINER_KEY", "PAIL_ROLLOUT_KEY", "PAIL_OPERATOR_KEY", "PAIL_CA_KEY", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"],
        "trainer": ["PAIL_TRAINER_KEY", "PAIL_OPERATOR_KEY"], "rollout": ["PAIL_ROLLOUT_KEY"], "eval": ["PAIL_ROLLOUT_KEY"]}[role]
vols = {"relay": [], "trainer": ["type='model', source='Qwen/Qwen3-0.6B', mount_path='/model'"],
        "rollout": ["type='model', source='Qwen/Qwen3-0.6B', mount_path='/model'",
                    "type='dataset', source='org/prompts', mount_path='/dataset'"]}
vols["eval"] = vols["rollout"]
if role == "relay":
    env_want["PAIL_UPSTREAM"] = "s3://my-bucket/pail"
    if j.get("network_aliases") != ["relay"]: bad.append(f"network_aliases {j.get('network_aliases')!r}")
else:
    env_want["PAIL_MODEL"] = "/model"
    if j.get("network_aliases"): bad.append(f"{role} claims aliases {j['network_aliases']}")
if role == "trainer": env_want.update(PAIL_STEPS="7", PAIL_TRAIN_ARGS="--lr 1e-5 --groups-per-step 32")
if role == "rollout": env_want["PAIL_DATASET"] = "/dataset/train.jsonl"
if role == "eval": env_want["PAIL_EVAL_DATASET"] = "/opt/pail/data/addition/eval.jsonl"
if role in ("rollout", "eval"): env_want["PAIL_TASK_ARGS"] = os.environ["PAIL_TASK_ARGS"]
elif "PAIL_TASK_ARGS" in env: bad.append(f"{role} gets PAIL_TASK_ARGS")
bad += [f"env {k}={env.get(k)!r}, want {v!r}" for k, v in env_want.items() if env.get(k) != v]
if sorted(sec) != sorted(keys): bad.append(f"secrets {sorted(sec)}, want {sorted(keys)}")
bad += [f"secret {k} is empty or not the environment's value" for k in sec if not sec[k] or sec[k] != os.environ.get(k)]
got_vols = j.get("volumes") or []
for v in vols[role]:
    if not any(v in g and "read_only=True" in g for g in got_vols): bad.append(f"no read-only volume {v} in {got_vols}")
if len(got_vols) != len(vols[role]): bad.append(f"volumes {got_vols}")
if j["flavor"] not in os.environ["FLAVORS"].split(): bad.append(f"flavor {j['flavor']} not in the CLI's JobHardware")
if j.get("labels", {}).get("pail-run") != "pail-ci-run": bad.append(f"labels {j.get('labels')}")
print("\n".join(bad), file=sys.stderr)
sys.exit(1 if bad else 0)
PY
}
check "relay command: the real CLI resolves it to the relay Job we meant" expect_role 1 relay cpu-upgrade
check "trainer command: resolved as meant" expect_role 2 trainer cpu-xl
check "rollout command 1: resolved as meant" expect_role 3 rollout cpu-xl
check "rollout command 2: resolved as meant" expect_role 4 rollout cpu-xl
check "rollout workers get distinct ids (hf-pail-ci-run-r0, -r1)" \
  test "$(grep -ho '"PAIL_WORKER_ID": "[^"]*"' "$WORK/res-3.json" "$WORK/res-4.json" | paste -sd,)" \
  = '"PAIL_WORKER_ID": "hf-pail-ci-run-r0","PAIL_WORKER_ID": "hf-pail-ci-run-r1"'
check "eval command: resolved as meant" expect_role 5 eval cpu-upgrade
check "the CLI's own --dry-run accepts every command" bash -c "
  while read -r l; do eval \"c=(\$l)\"; '$HFBIN' \"\${c[@]:1:2}\" --dry-run \"\${c[@]:3}\" 2>&1 | grep -q 'Job not submitted' || exit 1
  done <'$WORK/cmds.txt'"
# The checks can fail: the CLI takes an unknown option for the IMAGE (so a typo
# would launch a wrong Job); the resolved-image comparison catches it.
sed 's/--flavor /--flavour /' "$WORK/cmds.txt" >"$WORK/cmds-typo.txt"; cp "$WORK/cmds.txt" "$WORK/cmds-good.txt"
cp "$WORK/cmds-typo.txt" "$WORK/cmds.txt"
expect_role 1 relay cpu-upgrade 2>"$WORK/typo.err"; rc=$?
cp "$WORK/cmds-good.txt" "$WORK/cmds.txt"
check "a misspelt option (--flavour) fails the relay check: the CLI took it for the image" \
  bash -c "[ $rc = 1 ] && grep -q \"^image: '--flavour'\" '$WORK/typo.err'"
expect_fail_last "the real parser rejects a command without image and command" 2 "Missing argument|missing argument" \
  "$HFBIN" jobs run --dry-run --flavor cpu-basic
check "flavors from the environment: PAIL_HF_TRAINER_FLAVOR=h200 -> --flavor h200, accepted" \
  bash -c "PAIL_HF_TRAINER_FLAVOR=h200 '$SUBMIT' --dry-run | sed -n 2p | grep -q -- '--flavor h200'"

# An external relay: no relay Job, no network group; PAIL_ENDPOINT instead.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -keyout "$WORK/ext-ca.key" \
  -out "$WORK/ext-ca.pem" -subj /CN=ext >/dev/null 2>&1
check "PAIL_HF_ENDPOINT: trainer + 1 rollout Job, no relay, no network group" bash -c "
  PAIL_HF_ENDPOINT=https://relay.example.org:9443 PAIL_HF_CA_FILE='$WORK/ext-ca.pem' PAIL_HF_ROLLOUT_JOBS=1 \
  PAIL_EVAL_DATASET= PAIL_HF_STATE='$WORK/state-ext' '$SUBMIT' --dry-run >'$WORK/cmds-ext.txt' &&
  test \$(grep -c '^hf jobs run ' '$WORK/cmds-ext.txt') = 2 && ! grep -qE 'network-group|network-alias|PAIL_CA_KEY' '$WORK/cmds-ext.txt' &&
  grep -q 'PAIL_ENDPOINT=https://relay.example.org:9443' '$WORK/cmds-ext.txt'"
check "PAIL_HF_ENDPOINT commands: the real CLI resolves PAIL_ENDPOINT, no network group" bash -c "$(declare -f resolve venv);
  ROOT='$ROOT' WORK='$WORK'; while read -r l; do resolve \"\$l\" | grep -q '\"PAIL_ENDPOINT\": \"https://relay.example.org:9443\".*\"network_group\": null' || exit 1
  done <'$WORK/cmds-ext.txt'"
expect_fail "submit.sh without PAIL_HF_IMAGE says so" 2 'PAIL_HF_IMAGE is not set' env -u PAIL_HF_IMAGE "$SUBMIT" --dry-run
expect_fail "submit.sh with a bad run name says so" 2 "PAIL_RUN 'a b'" env PAIL_RUN='a b' "$SUBMIT" --dry-run
expect_fail "submit.sh without PAIL_DATASET says so (no silent demo data)" 2 'PAIL_DATASET is not set: the training prompts' \
  env -u PAIL_DATASET "$SUBMIT" --dry-run
expect_fail "submit.sh with PAIL_HF_ENDPOINT but no keys says so" 2 'PAIL_TRAINER_KEY is not set' \
  env -u PAIL_TRAINER_KEY PAIL_HF_ENDPOINT=https://x:1 PAIL_HF_CA_FILE="$WORK/ext-ca.pem" PAIL_HF_STATE="$WORK/s3" "$SUBMIT" --dry-run

# --- 2. the Jobs' environment drives entrypoint.sh here -------------------------
"$BIN/grpo-ctl" init-model --out "$WORK/model" --model-type llama --hidden 32 --layers 2 --heads 2 --kv-heads 1 \
  --ffn 64 --vocab 257 --max-positions 64 --tokenizer "$ROOT/data/tokenizers/bytes" --dtype f32 --seed 3 \
  >"$WORK/init.log" 2>&1 || { cat "$WORK/init.log"; exit 1; }
PORT=$(free_port)
# job_env N: the -e values and --secrets of command N as `env` arguments, with the
# container's paths replaced by this checkout's (the only edits).
job_env() {
  local -a c out=(); eval "c=($(sed -n "${1}p" "$WORK/cmds.txt"))"
  local i
  for (( i = 0; i < ${#c[@]}; i++ )); do
    case ${c[$i]} in
      -e) out+=("${c[$((i + 1))]}") ;;
      --secrets) out+=("${c[$((i + 1))]}=${!c[$((i + 1))]}") ;;
    esac
  done
  # Each worker is capped at 6 shards (12 for the 10 the 5 steps need), so both must contribute.
  local task; task=$(printf '%s\n' "${out[@]}" | sed -n 's/^PAIL_TASK_ARGS=//p')
  [ -z "$task" ] || out+=(PAIL_TASK_ARGS="${task//\/opt\/pail\/data/$ROOT/data}")
  out+=(PAIL_BIN="$BIN" PAIL_MODEL="$WORK/model" PAIL_DATASET="$ROOT/data/addition/train.jsonl" PAIL_RELAY_HOST=127.0.0.1
        PAIL_RELAY_PORT="$PORT" PAIL_TMP="$WORK/tmp-$1" PAIL_START_TIMEOUT=60 PAIL_STOP_GRACE=60 PAIL_UPSTREAM=
        PAIL_RELAY_ROOT="$WORK/bucket" PAIL_STEPS=5 PAIL_GROUP_SIZE=4 PAIL_ACCESS_LOG="$WORK/access.log"
        PAIL_TRAIN_ARGS="--groups-per-step 4 --lora-rank 4 --lora-alpha 8 --token-budget 1024"
        PAIL_ROLLOUT_ARGS="--groups-per-shard 2 --batch-size 8 --max-new-tokens 4 --max-ahead 2 --max-shards 6" OMP_NUM_THREADS=1
        PAIL_EVAL_DATASET="$ROOT/data/addition/eval.jsonl" PAIL_EVAL_ARGS="--max-new-tokens 4 --batch-size 64")
  printf '%s\0' "${out[@]}"
}
role_of() { sed -n "${1}p" "$WORK/cmds.txt" | awk '{print $NF}'; }
start_role() {  # start_role N: run command N's role here, in the background
  local -a e; mapfile -d '' e < <(job_env "$1")
  env -i PATH="$PATH" HOME="$WORK" "${e[@]}" bash "$ROOT/hf-jobs/entrypoint.sh" "$(role_of "$1")" \
    >"$WORK/job-$1.log" 2>&1 &
  PIDS+=($!); eval "JOB_$1=$!"
}
t0=$(date +%s)
for n in 1 2 3 4 5; do start_role "$n"; done
waitpid_deadline() {  # waitpid_deadline PID SECONDS -> the exit status, or 124
  local i; for i in $(seq 1 $(( $2 * 10 ))); do kill -0 "$1" 2>/dev/null || { wait "$1"; return $?; }; sleep 0.1; done; return 124
}
check "trainer job (entrypoint.sh trainer) exits 0 within 120 s" waitpid_deadline "$JOB_2" 120
echo "  trainer done in $(( $(date +%s) - t0 )) s"
for n in 3 4; do check "rollout job $((n - 2)) exits 0 on control/stop within 60 s" waitpid_deadline "$(eval echo "\$JOB_$n")" 60; done
check "eval job exits 0 on control/stop within 60 s" waitpid_deadline "$JOB_5" 60
check "relay job exits 0 once the workers stopped, within 30 s" waitpid_deadline "$JOB_1" 30
check "adapters v0..v5 in the relay's bucket" test "$(ls "$WORK/bucket/ci-run/adapters" | grep -c '^v0000000[0-5]\.h5$')" = 6
check "the trainer wrote control/stop" test -e "$WORK/bucket/ci-run/control/stop"
check "the rollout Jobs scored with the Python reward of PAIL_TASK_ARGS (rewards/cmd/mean in every step's metrics)" \
  test "$(grep -c '"rewards/cmd/mean": *[0-9.e-]*[,}]' "$WORK/tmp-2/metrics.jsonl")" = 5
check "the eval Job scored with the same Python reward (PAIL_TASK_ARGS): a cmd component in its evaluations" \
  bash -c "grep -l '\"cmd\":' '$WORK'/bucket/ci-run/eval/v*.json | grep -q ."
check "shards of both rollout jobs were consumed (worker ids from the commands)" bash -c "
  grep -q 'trainer GET GET ci-run/rollouts/v[0-9]*/hf-pail-ci-run-r0-' '$WORK/access.log' &&
  grep -q 'trainer GET GET ci-run/rollouts/v[0-9]*/hf-pail-ci-run-r1-' '$WORK/access.log'"
check "the relay's certificate (signed at start with the CA secret) verifies against PAIL_CA_CERT" \
  openssl verify -CAfile "$WORK/state/ca.pem" "$WORK/tmp-1/relay.pem"
check "the relay job removed its copy of the CA key" test ! -e "$WORK/tmp-1/ca.key"
check "no errors in the jobs' logs" bash -c "! grep -iE '\\b(error|fatal|panic)\\b' '$WORK'/job-*.log"
expect_fail "entrypoint.sh with an unknown role says so" 2 'usage: entrypoint.sh relay\|trainer\|rollout\|eval' \
  bash "$ROOT/hf-jobs/entrypoint.sh" coordinator
expect_fail "entrypoint.sh with a malformed key secret says so" 2 "secret PAIL_ROLLOUT_KEY must hold 'ACCESS_KEY_ID SECRET'" \
  env PAIL_RUN=r PAIL_CA_CERT="$CA_B64" PAIL_ROLLOUT_KEY=onlyone PAIL_TMP="$WORK/tmp-x" PAIL_MODEL="$WORK/model" \
  PAIL_DATASET=x bash "$ROOT/hf-jobs/entrypoint.sh" rollout

# --- 3. the image's runtime packages cover the executables' libraries -----------
runtime_ok() {
  local pkgs lib path pkg missing=()
  pkgs=" $(sed -n 's/^ARG RUNTIME_PKGS="\(.*\)"$/\1/p' "$ROOT/hf-jobs/Dockerfile") "
  [ "$pkgs" != "  " ] || { echo "no ARG RUNTIME_PKGS line in hf-jobs/Dockerfile" >&2; return 1; }
  for lib in $(for b in "$BIN"/grpo-*; do readelf -d "$b" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p'; done | sort -u); do
    case $lib in libc.so.*|libm.so.*|libz.so.*|libdl.so.*|libpthread.so.*|ld-linux*) continue ;; esac  # libc6 / zlib1g (essential)
    path=$(ldconfig -p | awk -v l="$lib" '$1 == l { print $NF; exit }')
    pkg=$(dpkg -S "$(readlink -f "$path")" 2>/dev/null | head -1 | cut -d: -f1)
    [[ "$pkgs" == *" $pkg "* ]] || missing+=("$lib ($pkg)")
  done
  [ ${#missing[@]} = 0 ] || { echo "not in RUNTIME_PKGS: ${missing[*]}" >&2; return 1; }
}
check "hf-jobs/Dockerfile RUNTIME_PKGS provide every library the executables link (readelf + dpkg -S)" runtime_ok
# No docker daemon here: the final stage's apt-get line must install TASK_PKGS, which name python3.
task_pkgs_ok() {
  local f=$ROOT/hf-jobs/Dockerfile
  grep -Eq '^ARG TASK_PKGS="([^"]* )?python3( [^"]*)?"$' "$f" || { echo "no python3 in ARG TASK_PKGS" >&2; return 1; }
  sed -n '/^FROM debian:12-slim$/,$p' "$f" | grep -Fq 'install -y --no-install-recommends $RUNTIME_PKGS $TASK_PKGS' \
    || { echo "the final stage does not install \$TASK_PKGS" >&2; return 1; }
}
check "hf-jobs/Dockerfile's image installs python3 (TASK_PKGS) for Python rewards and --env programs" task_pkgs_ok
finish
