"""Runs a command (its stdout discarded, stderr kept) and prints its peak
memory: the peak resident set (getrusage of the child: ru_maxrss, the kernel's
VmHWM) and, polled from /proc/PID/status every ~2 ms, the peaks of its
anonymous (RssAnon: heap, the weight block) and file-backed (RssFile: mapped
files such as a safetensors checkpoint) parts. Used by bench/dtype_memory.sh.
Usage: peak_rss.py CMD [ARGS...] -> "peak_rss_kb N rss_anon_kb N rss_file_kb N wall_s X".
With PEAK_RSS_STDOUT=FILE in the environment the command's stdout goes to FILE;
with PEAK_RSS_POLL=0 it does not poll (the two parts print 0): a timed run on
2 cores then shares no CPU with this script."""
import os
import resource
import subprocess
import sys
import time

t0 = time.perf_counter()
out = open(os.environ["PEAK_RSS_STDOUT"], "wb") if os.environ.get("PEAK_RSS_STDOUT") else subprocess.DEVNULL
p = subprocess.Popen(sys.argv[1:], stdout=out)
peak = {"RssAnon": 0, "RssFile": 0}
if os.environ.get("PEAK_RSS_POLL") == "0":
    p.wait()
while p.poll() is None:
    try:
        with open(f"/proc/{p.pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in peak:
                    peak[k] = max(peak[k], int(v.split()[0]))
    except (OSError, ValueError, IndexError):
        pass
    time.sleep(0.002)
wall = time.perf_counter() - t0
hwm = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # kB on Linux
print(f"peak_rss_kb {hwm} rss_anon_kb {peak['RssAnon']} rss_file_kb {peak['RssFile']} wall_s {wall:.2f}")
sys.exit(p.returncode)
