"""Resolve an `hf jobs run ...` command line with the real huggingface_hub CLI
(its own parser and option handling) and print, as JSON, the arguments it would
pass to HfApi.run_job, without contacting the Hub: run_job is replaced by a
recorder. hf:// volumes go through the CLI's own parsing, which needs no
network (a local-folder volume would be uploaded first: submit.sh never emits
one). Needs a token-shaped HF_TOKEN (never sent: nothing is contacted).
Usage: python resolve.py hf jobs run [OPTIONS] IMAGE COMMAND...
Exit status: the CLI's own (2 for a usage error), 0 when run_job was reached.
Used by tests/integration/test_hf_jobs.sh to check hf-jobs/submit.sh's commands."""
import json
import sys

import huggingface_hub
from huggingface_hub import HfApi
from huggingface_hub.cli.hf import main


class Reached(Exception):
    pass


def record(self, **kwargs):
    vols = kwargs.get("volumes")
    kwargs["volumes"] = None if vols is None else [repr(v) for v in vols]
    print(json.dumps({"huggingface_hub": huggingface_hub.__version__, "run_job": kwargs}, default=str, sort_keys=True))
    sys.stdout.flush()
    raise Reached()


HfApi.run_job = record
args = sys.argv[1:]
if args[:1] == ["hf"]:
    args = args[1:]
sys.argv = ["hf"] + args
try:
    rc = main()
except Reached:
    sys.exit(0)
except SystemExit as e:
    sys.exit(e.code if isinstance(e.code, int) else 1)
sys.exit(rc if isinstance(rc, int) else 1 if rc else 3)  # returned without reaching run_job
