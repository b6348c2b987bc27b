"""How fast can the open-loop generator go on this machine? (a benchmark script, not a test)

Drives a trivial python model on an embedded Triton with Poisson arrivals at rising rates, with 1 and
then 2 generator processes, and prints achieved vs target rate, p99 send lag and whether the rate was
held (achieved >= 98% of target and the send lag did not grow). The last line gives the highest rate
each setting held: above it, open-loop measurements on this machine measure the generator, so use
``processes=2`` (or a bigger client machine).

    .venv/bin/python benchmarks/loadgen.py [--rates 50,100,...] [--window 2.0]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

from gpt_triton.core.measurements import LoadProfile
from gpt_triton.measure.loadgen import run_window
from gpt_triton.server import EmbeddedTriton

MODEL_PY = '''
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("y", pb_utils.get_input_tensor_by_name(r, "x").as_numpy()[:, :4])])
                for r in requests]
'''

CONFIG = '''
name: "trivial"
backend: "python"
max_batch_size: 0
input [ { name: "x" data_type: TYPE_FP32 dims: [ -1, 16 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="50,100,200,400,800,1600,3200")
    parser.add_argument("--window", type=float, default=2.0, help="seconds per rate")
    parser.add_argument("--processes", default="1,2")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        (repo / "trivial" / "1").mkdir(parents=True)
        (repo / "trivial" / "1" / "model.py").write_text(MODEL_PY)
        (repo / "trivial" / "config.pbtxt").write_text(CONFIG)
        requests = [{"x": np.random.default_rng(0).random((1, 16), dtype=np.float32)}]
        best: dict[int, float] = {}
        with EmbeddedTriton(repository=repo, workdir=Path(tmp) / "work") as server:
            server.load(repo / "trivial")
            print(f"{'procs':>5} {'target/s':>9} {'achieved/s':>10} {'ratio':>6} {'lag p99 ms':>10} "
                  f"{'p99 ms':>8} {'errors':>6} held")
            for procs in (int(p) for p in args.processes.split(",")):
                best[procs] = 0.0
                for rate in rates:
                    w = run_window(server.grpc_url, "trivial", requests, LoadProfile(kind="rate", rate=rate),
                                   args.window, processes=procs, seed=int(rate))
                    r = w.result
                    achieved = r.rate_achieved or 0.0
                    print(f"{procs:>5} {rate:>9.0f} {achieved:>10.1f} {achieved / rate:>6.3f} "
                          f"{r.send_lag_p99_ms or 0:>10.2f} {r.p99_ms:>8.2f} {r.errors:>6} {r.rate_held}")
                    # Contiguous from the bottom: a rate counts only if every lower rate held too.
                    if r.rate_held and r.errors == 0 and best[procs] == max([0.0] + [x for x in rates if x < rate]):
                        best[procs] = rate
        print("highest rate held within 2% (all lower rates held too): " + ", ".join(f"{p} process(es): {b:.0f}/s" for p, b in best.items()))


if __name__ == "__main__":  # required: processes>1 spawns workers that re-import this module
    main()
