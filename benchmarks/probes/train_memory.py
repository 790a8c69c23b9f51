"""Resident memory over the phases of `hf-fold train` (SmolLM2 -> Gemma 3 on bundled:wide): a thread samples RSS
every 0.1 s; each phase is tagged by wrapping the function that runs it (collect, prepare_batch, starting_map,
Lightning's fit, the held-out evaluate). Prints each phase's entry/exit RSS and the peak within it.

    W=400 S=6 .venv/bin/python benchmarks/probes/train_memory.py   # W training windows, S calibration steps

Which phase holds the peak is what this finds; the run's own peak is /usr/bin/time's "Maximum resident set size".
"""
import resource, sys, threading, time, functools, os
sys.argv = sys.argv[:1]
import psutil
proc = psutil.Process()
phase = ["start"]; peaks = {}; t0 = time.time(); log = []
def sample():
    while True:
        rss = proc.memory_info().rss / 2**30
        p = phase[-1]
        peaks[p] = max(peaks.get(p, 0), rss)
        time.sleep(0.1)
threading.Thread(target=sample, daemon=True).start()
def tag(mod, name, label):
    f = getattr(mod, name)
    @functools.wraps(f)
    def w(*a, **k):
        phase.append(label); log.append((time.time() - t0, "enter", label, proc.memory_info().rss / 2**30))
        try: return f(*a, **k)
        finally:
            log.append((time.time() - t0, "exit", label, proc.memory_info().rss / 2**30)); phase.append(f"after {label}")
    setattr(mod, name, w)
import heterofold_hub.methods.fitting as fitting
import heterofold_hub.trainers.calibrate as cal, heterofold_hub.trainers.train as tr
import heterofold_hub.evaluation.fidelity as fid, lightning as L
tag(fitting, "collect", "collect")
tag(fitting, "prepare_batch", "prepare_batch")
tag(cal, "starting_map", "starting_map")
tag(L.Trainer, "fit", "trainer.fit")
tag(fid, "evaluate", "evaluate")
from rich.console import Console
args = tr.TrainArgs(sender="gguf/smollm2-135m-instruct-q4_1", receiver="gguf/gemma3-270m-q4_k_m", data="bundled:wide",
                    windows=int(os.environ.get("W", 400)), max_steps=int(os.environ.get("S", 6)), eval_windows=8,
                    out=__import__("pathlib").Path("/tmp/memprobe-out"))
import shutil; shutil.rmtree("/tmp/memprobe-out", ignore_errors=True)
tr.run_train(args, Console())
for e in log: print("%7.1fs %-5s %-14s rss %.2f GB" % e)
seen = []
for p, v in peaks.items(): print(f"peak in {p:22s} {v:.2f} GB")
print("ru_maxrss", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, "GB")
