"""Loads a `kforge export --kernelbench` file under plain PyTorch and checks ModelNew against Model.

Usage: python3 scripts/check_export.py EXPORTED.py [--trials N]
Builds Model and ModelNew from the same seed (as KernelBench's eval does), runs both on fresh
inputs from get_inputs() on the GPU, and compares every output with fp32 tolerance 1e-4.
Prints one line per trial and exits 0 when all match.
"""
import argparse
import importlib.util
import sys
import time

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    spec = importlib.util.spec_from_file_location("exported", args.path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    init = mod.get_init_inputs()
    torch.manual_seed(0)
    model = mod.Model(*init).cuda()
    torch.manual_seed(0)
    started = time.time()
    model_new = mod.ModelNew(*init).cuda()
    ok = True
    for trial in range(args.trials):
        torch.manual_seed(100 + trial)
        inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()]
        with torch.no_grad():
            ref = model(*inputs)
            out = model_new(*inputs)
        torch.cuda.synchronize()
        refs = ref if isinstance(ref, (tuple, list)) else (ref,)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        for i, (r, o) in enumerate(zip(refs, outs)):
            tol = 1e-2 if r.dtype in (torch.float16, torch.bfloat16) else 1e-4
            match = torch.allclose(o, r, atol=tol, rtol=tol)
            err = (o.double() - r.double()).abs().max().item()
            print(f"trial {trial} output {i}: {'match' if match else 'MISMATCH'} (max abs err {err:.3e})")
            ok &= match
    print(f"ModelNew built and ran in {time.time() - started:.1f} s (load_inline compile included)")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
