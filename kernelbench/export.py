#!/usr/bin/env python3
"""Turns KernelBench-format problem files into kforge problem bundles (DESIGN.md §2, §3.1).

`kforge import` runs this file (embedded in its binary) as `python3 export.py --job JOB.json`.
It also runs by hand: `python3 export.py PROBLEM.py... --out DIR [--size NAME=VALUE]...`.

A problem file defines `class Model(nn.Module)`, module-level size constants, `get_inputs()` (the
arguments of `forward`) and `get_init_inputs()` (the constructor's). For each file this writes
`<out>/<name>/`:

  problem.json   specs of inputs, constants, parameters, outputs; flops, min bytes, self-check
  reference.pt   TorchScript trace of the model with its weights: forward(*input tensors) returns
                 a tuple of outputs; method state(dummy) returns the parameters and buffers in
                 state_dict order
  inputs.pt      TorchScript trace of get_inputs(): forward(dummy) returns the input tensors, made
                 on the bundle's device, so torch.manual_seed(s) (tch::manual_seed(s) in Rust)
                 reproduces Python's get_inputs() exactly
  expected.pt    (small problems only) forward(dummy) returns the inputs and Python eager outputs
                 for the self-check seed, so the Rust side can check itself against Python
  baselines/<gpu>.json   eager, torch.compile and TorchScript-reference times (DESIGN.md §4)

Progress goes to stdout as `KFORGE_EVENT {json}` lines, one `result` per problem; whatever the
problems print goes to stderr. A problem that cannot be exported is skipped with a one-line reason
and the batch goes on. Re-exporting an unchanged problem is a no-op (content hash).
"""

import argparse
import ast
import contextlib
import datetime
import gc
import hashlib
import inspect
import json
import math
import os
import platform
import shutil
import signal
import socket
import statistics
import sys
import time
import traceback
import types
import warnings

import torch

FORMAT_VERSION = 1
# Weights are initialised under this seed, on the CPU, as KernelBench's own eval does before
# moving the model to the GPU: the same problem gets the same weights on every machine.
INIT_SEED = 0
# The seed of the recorded self-check (and of expected.pt).
CHECK_SEED = 1
# More seeds on which the trace must still agree with eager: a branch on tensor values or a
# value read with .item() is frozen into a trace and shows up as a mismatch on other inputs.
EXTRA_SEEDS = (2, 3)
# expected.pt is written only when the check seed's inputs and outputs fit in this.
EXPECTED_LIMIT_BYTES = 64 * 1024 * 1024
EVENT_PREFIX = "KFORGE_EVENT "
# Names whose use means the problem downloads weights (KernelBench level 4): out of scope offline.
DOWNLOAD_MARKERS = (
    "from_pretrained",
    "hf_hub_download",
    "snapshot_download",
    "load_state_dict_from_url",
    "download_url_to_file",
)
# DESIGN.md §4: at least 3 warm-ups and 100 timed calls, several input sets rotated.
WARMUP_CALLS = 3
TIMED_CALLS = 100
INPUT_SETS = 3
# Datasheet dense rates (FLOP/s) for the GPUs kforge is used on; measured rates join them and
# the higher of the two is the floor's peak (a floor must be a lower bound on time).
DATASHEET_PEAKS = {
    "H200": {"float64": 67e12, "float32": 67e12, "tfloat32": 494.7e12, "bfloat16": 989.4e12,
             "float16": 989.4e12, "int8": 1978.9e12},
    "H100": {"float64": 67e12, "float32": 67e12, "tfloat32": 494.7e12, "bfloat16": 989.4e12,
             "float16": 989.4e12, "int8": 1978.9e12},
    "A100": {"float64": 19.5e12, "float32": 19.5e12, "tfloat32": 156e12, "bfloat16": 312e12,
             "float16": 312e12, "int8": 624e12},
}

EVENTS = sys.stdout


class Skip(Exception):
    """A problem that cannot be exported; the message is the one-line reason."""


class ProblemTimeout(BaseException):
    """Raised by the per-problem alarm (a BaseException so problem code cannot swallow it)."""


def emit(**event):
    EVENTS.write(EVENT_PREFIX + json.dumps(finite(event)) + "\n")
    EVENTS.flush()


def finite(value):
    """JSON has no NaN or infinity: such numbers travel as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def first_line(text):
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


def describe_exception(exc, display):
    """`TypeError: ... (line 12)`, the line being the deepest frame inside the problem file."""
    frames = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if f.filename == display]
    where = f" (line {frames[-1]})" if frames else ""
    return f"{type(exc).__name__}: {first_line(exc)}{where}"


def dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def sha256_text(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def exporter_digest():
    with open(os.path.abspath(__file__), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def gpu_slug(name):
    """`NVIDIA H200` -> `nvidia-h200` (src/problem/mod.rs spells the same rule)."""
    slug = "".join(c.lower() if c.isascii() and c.isalnum() else "-" for c in name)
    return "-".join(part for part in slug.split("-") if part)


@contextlib.contextmanager
def offline():
    """Problem code runs with outbound connections refused, so a download fails at once with a
    clear message instead of hanging until the timeout."""

    def refuse(*_args, **_kwargs):
        raise OSError("network access is blocked while exporting (kforge import runs offline)")

    saved = (socket.socket.connect, socket.socket.connect_ex, socket.create_connection,
             socket.getaddrinfo)
    socket.socket.connect = refuse
    socket.socket.connect_ex = refuse
    socket.create_connection = refuse
    socket.getaddrinfo = refuse
    try:
        yield
    finally:
        (socket.socket.connect, socket.socket.connect_ex, socket.create_connection,
         socket.getaddrinfo) = saved


# ---------------------------------------------------------------------------------------------
# Loading a problem file


def parse_size_value(text):
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"--size value {text!r} is not a number")
    return value


def module_level_names(tree):
    """Names assigned at module level, in order, each with the AST node of its value."""
    found = []
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found.append((target.id, node, None))
                elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                    for i, element in enumerate(target.elts):
                        if isinstance(element, ast.Name) and i < len(node.value.elts):
                            found.append((element.id, node, i))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            found.append((node.target.id, node, None))
    return found


def apply_sizes(tree, sizes):
    """Rewrites module-level `name = ...` for each override, so constants derived from it (and
    get_inputs/get_init_inputs, which read them at call time) see the new value."""
    applied = {}
    for name, node, index in module_level_names(tree):
        if name not in sizes:
            continue
        constant = ast.copy_location(ast.Constant(sizes[name]), node.value)
        if index is None:
            node.value = constant
        else:
            node.value.elts[index] = constant
        applied[name] = sizes[name]
    return applied


def screen_downloads(tree):
    for node in ast.walk(tree):
        name = None
        if isinstance(node, ast.Attribute):
            name = node.attr
            if name == "load" and isinstance(node.value, ast.Attribute) and node.value.attr == "hub":
                name = "torch.hub.load"
        elif isinstance(node, ast.Name):
            name = node.id
        if name in DOWNLOAD_MARKERS or name == "torch.hub.load":
            raise Skip(f"downloads pretrained weights (`{name}`, line {node.lineno}): level-4 "
                       "style problems need the network, and kforge import runs offline")


def read_problem(path, display, sizes):
    """Reads, screens and rewrites one problem file (no problem code runs yet)."""
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise Skip(f"cannot read the file: {first_line(e)}")
    try:
        tree = ast.parse(source, filename=display)
    except SyntaxError as e:
        raise Skip(f"syntax error at line {e.lineno}: {e.msg}")
    screen_downloads(tree)
    applied = apply_sizes(tree, sizes)
    return types.SimpleNamespace(source=source, tree=tree, display=display,
                                 applied_sizes=applied)


def execute_problem(problem, path, index):
    """Runs the (rewritten) problem file as a module and picks out its parts."""
    module = types.ModuleType(f"kforge_problem_{index}")
    module.__file__ = path
    sys.modules[module.__name__] = module
    try:
        with offline():
            exec(compile(problem.tree, problem.display, "exec"), module.__dict__)
    except (Exception, SystemExit) as e:
        raise Skip(f"fails when run: {describe_exception(e, problem.display)}")
    problem.module_constants = {}
    for name, _node, _index in module_level_names(problem.tree):
        value = module.__dict__.get(name)
        if isinstance(value, (bool, int, float)):
            problem.module_constants[name] = value
    model_class = getattr(module, "Model", None)
    if not (inspect.isclass(model_class) and issubclass(model_class, torch.nn.Module)):
        raise Skip("defines no `class Model(nn.Module)`")
    for function in ("get_inputs", "get_init_inputs"):
        if not callable(getattr(module, function, None)):
            raise Skip(f"defines no `{function}()`")
    problem.model_class = model_class
    problem.get_inputs = module.get_inputs
    problem.get_init_inputs = module.get_init_inputs


def build_model(problem, device):
    """The model with its weights drawn under INIT_SEED on the CPU, then moved to `device`."""
    torch.manual_seed(INIT_SEED)
    try:
        with offline():
            init_inputs = list(problem.get_init_inputs())
            model = problem.model_class(*init_inputs)
    except Skip:
        raise
    except Exception as e:
        raise Skip(f"building the model fails: {describe_exception(e, problem.display)}")
    return init_inputs, model.to(device)


def jsonable(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return repr(value)


def carryable(value):
    """A non-tensor forward argument that can be baked into the trace as a constant."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(v is None or isinstance(v, (bool, int, float)) for v in value)
    return False


def describe_value(value):
    if isinstance(value, (list, tuple)) and any(isinstance(v, torch.Tensor) for v in value):
        return f"{type(value).__name__} of tensors"
    return type(value).__name__


# ---------------------------------------------------------------------------------------------
# Comparing values


def tolerance(dtype):
    """DESIGN.md §4: fp32 1e-4, fp16/bf16 1e-2, integers and bools exact."""
    if dtype in (torch.float16, torch.bfloat16):
        return 1e-2
    if dtype.is_floating_point or dtype.is_complex:
        return 1e-4
    return 0.0


def identical(a, b):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
            return False
        if a.dtype.is_floating_point or a.dtype.is_complex:
            return bool(torch.equal(a, b) or torch.allclose(a, b, rtol=0, atol=0, equal_nan=True))
        return bool(torch.equal(a, b))
    return type(a) is type(b) and a == b


def max_abs_diff(a, b):
    if a.numel() == 0:
        return 0.0
    if a.dtype == torch.bool:
        return float((a != b).sum().item())
    x, y = a, b
    if not (a.dtype.is_floating_point or a.dtype.is_complex) or a.dtype in (torch.float16,
                                                                            torch.bfloat16):
        x, y = a.double() if a.dtype in (torch.int64, torch.uint64) else a.float(), \
            b.double() if b.dtype in (torch.int64, torch.uint64) else b.float()
    nan_x, nan_y = torch.isnan(x), torch.isnan(y)
    if not torch.equal(nan_x, nan_y):
        return math.inf
    diff = (x - y).abs().masked_fill(nan_x, 0)
    return float(diff.max().item())


def compare_outputs(expected, actual):
    """(all close, max abs diff) for two output tuples."""
    if len(expected) != len(actual):
        return False, math.inf
    worst, ok = 0.0, True
    for e, a in zip(expected, actual):
        if e.shape != a.shape or e.dtype != a.dtype:
            return False, math.inf
        worst = max(worst, max_abs_diff(e, a))
        tol = tolerance(e.dtype)
        if tol == 0.0:
            ok = ok and bool(torch.equal(e, a))
        else:
            ok = ok and bool(torch.allclose(a, e, rtol=tol, atol=tol, equal_nan=True))
    return ok, worst


# ---------------------------------------------------------------------------------------------
# The modules that get traced


def output_tuple(out):
    if isinstance(out, torch.Tensor):
        return (out,)
    if isinstance(out, (tuple, list)) and out and all(isinstance(t, torch.Tensor) for t in out):
        return tuple(out)
    raise Skip(f"forward returns a {describe_value(out)}: kforge needs a tensor or a "
               "tuple/list of tensors")


def state_entries(model):
    """Parameters and buffers in state_dict order (each module's own parameters, then its own
    buffers, then its children), keeping the non-persistent buffers state_dict leaves out, in
    the place they would take: a kernel needs them as much as the persistent ones."""
    entries = []
    for prefix, module in model.named_modules(remove_duplicate=False):
        dot = f"{prefix}." if prefix else ""
        for name, tensor in module._parameters.items():
            if tensor is not None:
                entries.append((dot + name, tensor, "parameter", True))
        for name, tensor in module._buffers.items():
            if tensor is not None:
                persistent = name not in module._non_persistent_buffers_set
                entries.append((dot + name, tensor, "buffer", persistent))
    return entries


class InputGenerator(torch.nn.Module):
    """forward(dummy) = the tensors of get_inputs(), on the bundle's device."""

    def __init__(self, get_inputs, tensor_positions, device):
        super().__init__()
        self.get_inputs = get_inputs
        self.tensor_positions = tensor_positions
        self.target = device

    def forward(self, dummy):
        items = list(self.get_inputs())
        return tuple(items[i].to(self.target) for i in self.tensor_positions)


class Reference(torch.nn.Module):
    """forward(*tensors) = the model's outputs as a tuple, the non-tensor arguments baked in;
    state(dummy) = its parameters and buffers in state_dict order."""

    def __init__(self, model, arity, constants):
        super().__init__()
        self.model = model
        self.arity = arity
        self.constants = constants

    def forward(self, *tensors):
        args, remaining = [], iter(tensors)
        for position in range(self.arity):
            args.append(self.constants[position] if position in self.constants
                        else next(remaining))
        out = self.model(*args)
        return (out,) if isinstance(out, torch.Tensor) else tuple(out)

    def state(self, dummy):
        return tuple(tensor for _, tensor, _, _ in state_entries(self.model))


class Recorded(torch.nn.Module):
    """forward(dummy) = the recorded tensors (expected.pt)."""

    def __init__(self, tensors):
        super().__init__()
        self.count = len(tensors)
        for i, tensor in enumerate(tensors):
            self.register_buffer(f"t{i}", tensor.detach().clone())

    def forward(self, dummy):
        return tuple(getattr(self, f"t{i}") for i in range(self.count))


# ---------------------------------------------------------------------------------------------
# Exporting one problem


def draw_inputs(problem, seed, device):
    """get_inputs() under `seed`, factories landing on `device`; non-tensors checked."""
    torch.manual_seed(seed)
    try:
        with torch.device(device), offline():
            items = problem.get_inputs()
    except Skip:
        raise
    except Exception as e:
        raise Skip(f"get_inputs() fails: {describe_exception(e, problem.display)}")
    if not isinstance(items, (list, tuple)):
        raise Skip(f"get_inputs() returns a {describe_value(items)}, not a list of arguments")
    drawn = []
    for position, item in enumerate(items):
        if isinstance(item, torch.Tensor):
            drawn.append(item.detach().to(device))
        elif carryable(item):
            drawn.append(item)
        else:
            raise Skip(f"get_inputs() item {position} is a {describe_value(item)}: only tensors "
                       "and plain numbers, bools or strings can be carried into a bundle")
    return drawn


def run_eager(model, args):
    with torch.no_grad():
        return output_tuple(model(*args))


def forward_arg_names(model, arity):
    names = []
    try:
        parameters = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):
        parameters = []
    for p in parameters:
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            names.append(p.name)
        else:
            break
    return [names[i] if i < len(names) else f"arg{i}" for i in range(arity)]


def describe_structure(samples):
    """What the candidate may rely on in an input, read off its values for several seeds."""
    first = samples[0]
    if first.dtype == torch.bool:
        return "boolean", None
    if first.is_complex():
        return None, None
    low = min(float(s.min().item()) for s in samples) if first.numel() else None
    high = max(float(s.max().item()) for s in samples) if first.numel() else None
    value_range = None if low is None else [low, high]
    if not first.dtype.is_floating_point:
        return "integer", value_range
    if first.numel() == 0:
        return None, None

    def holds(test):
        return all(bool(test(s)) for s in samples)

    if holds(lambda s: torch.equal(s, torch.full_like(s, s.flatten()[0].item()))):
        return "constant", value_range
    if holds(lambda s: ((s == 1) | (s == -1)).all()):
        return "plus_minus_one", value_range
    if first.dim() >= 2 and first.shape[-1] >= 2 and first.shape[-2] >= 2:
        upper = holds(lambda s: torch.equal(s, s.triu()))
        lower = holds(lambda s: torch.equal(s, s.tril()))
        if upper and lower:
            return "diagonal", value_range
        if upper:
            return "upper_triangular", value_range
        if lower:
            return "lower_triangular", value_range
        if first.shape[-1] == first.shape[-2] and holds(lambda s: torch.equal(s, s.mT)):
            return "symmetric", value_range
    if low is not None and low >= 0:
        return "non_negative", value_range
    return None, value_range


def count_flops(model, args, notes):
    """(total FLOPs, FLOPs per aten op) by PyTorch's FlopCounterMode."""
    from torch.utils.flop_counter import FlopCounterMode

    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(*args)
        flops = int(counter.get_total_flops())
        by_op = {str(op): int(n) for op, n in counter.get_flop_counts().get("Global", {}).items()}
    except Exception as e:
        notes.append(f"flops not counted: FlopCounterMode failed ({first_line(e)})")
        return 0, {}
    if flops == 0:
        notes.append("flops = 0: FlopCounterMode counts matmul/conv-like ops only; this problem "
                     "has none, so its floor is set by memory traffic")
    return flops, by_op


def trace_quietly(function, display, what, notes):
    """Runs a tracing call, turning the problem's own tracer warnings into skips or notes."""
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        try:
            traced = function()
        except Skip:
            raise
        except Exception as e:
            raise Skip(f"tracing {what} failed: {describe_exception(e, display)}")
    for w in caught:
        if not issubclass(w.category, torch.jit.TracerWarning) or w.filename != display:
            continue
        message = first_line(w.message)
        if "Python boolean" in message:
            raise Skip(f"{what} branches on tensor values (line {w.lineno}): a trace records "
                       "only the branch the example inputs took")
        notes.append(f"line {w.lineno}: {message.split('.')[0]} (traced as a constant; checked "
                     "against eager on other seeds)")
    return traced


def export_problem(entry, job, device, index, gpu, seen_sizes):
    """Exports one problem; returns the result event's fields."""
    display = os.path.basename(entry["path"])
    sizes = job["sizes"]
    problem = read_problem(entry["path"], display, sizes)
    seen_sizes.update(problem.applied_sizes)
    if job.get("single") and set(sizes) - set(problem.applied_sizes):
        unknown = sorted(set(sizes) - set(problem.applied_sizes))
        known = ", ".join(sorted({name for name, _, _ in module_level_names(problem.tree)}))
        raise Skip(f"--size {', '.join(unknown)}: not a module-level constant of this file "
                   f"(it has: {known or 'none'})")
    content_hash = sha256_text(json.dumps({
        "format_version": FORMAT_VERSION, "exporter": EXPORTER_DIGEST, "name": entry["name"],
        "level": entry.get("level"), "source": problem.source,
        "sizes": sorted(problem.applied_sizes.items()), "device": device,
    }, sort_keys=True))
    bundle_dir = os.path.join(job["out"], *entry["name"].split("/"))
    existing = read_existing(bundle_dir)
    if existing is not None and existing.get("content_hash") == content_hash:
        result = {"status": "unchanged", "bundle": bundle_dir, **summary_of(existing)}
        if gpu is not None:
            result["baseline"] = baseline_for(bundle_dir, existing, problem, entry, index,
                                              device, gpu, job)
        return result

    execute_problem(problem, entry["path"], index)
    notes = []
    init_inputs, model = build_model(problem, device)
    if not jsonable_exact(init_inputs):
        notes.append("init_inputs hold values JSON cannot carry; problem.json shows their repr")

    first = draw_inputs(problem, CHECK_SEED, device)
    again = draw_inputs(problem, CHECK_SEED, device)
    if not all(identical(a, b) for a, b in zip(first, again)):
        raise Skip("get_inputs() is not reproducible from torch.manual_seed: it draws from "
                   "another random source (numpy, random, time)")
    del again
    other = draw_inputs(problem, EXTRA_SEEDS[0], device)
    tensor_positions = [i for i, v in enumerate(first) if isinstance(v, torch.Tensor)]
    if not tensor_positions:
        raise Skip("get_inputs() returns no tensors")
    constants = {i: v for i, v in enumerate(first) if not isinstance(v, torch.Tensor)}
    for position, value in constants.items():
        if isinstance(other[position], torch.Tensor) or other[position] != value:
            raise Skip(f"get_inputs() item {position} ({value!r}) changes with the seed: a "
                       "non-tensor argument must stay the same to be baked into the reference")
    del other

    stochastic, mutates = detect_stochastic(model, problem, device, first)
    eval_mode = False
    if stochastic:
        model.eval()
        eval_mode = True
        if detect_stochastic(model, problem, device, first)[0]:
            raise Skip("outputs differ from run to run on the same inputs, even in eval mode")
        notes.append("outputs differ run to run in training mode (dropout or similar): exported "
                     "and timed in eval mode")
    if mutates:
        notes.append("forward modifies its inputs in place")
    problem.layout = types.SimpleNamespace(
        arity=len(first), tensor_positions=tensor_positions, constants=constants,
        names=forward_arg_names(model, len(first)), mutates=mutates)
    del first

    staging = staging_dir(bundle_dir)
    try:
        fields = trace_and_check(problem, model, device, notes, staging)
        spec = {
            "format_version": FORMAT_VERSION,
            "name": entry["name"],
            "level": entry.get("level"),
            "source_file": display,
            "source": problem.source,
            "source_sha256": sha256_text(problem.source),
            "size_overrides": problem.applied_sizes,
            "module_constants": problem.module_constants,
            "device": device,
            **fields,
            "init_inputs": jsonable(init_inputs),
            "init_seed": INIT_SEED,
            "stochastic": stochastic,
            "eval_mode": eval_mode,
            "notes": notes,
            "exported_with": {"torch": torch.__version__, "python": platform.python_version()},
            "content_hash": content_hash,
        }
        with open(os.path.join(staging, "problem.json"), "w", encoding="utf-8") as f:
            json.dump(finite(spec), f, indent=2)
            f.write("\n")
        publish(staging, bundle_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    result = {"status": "imported", "bundle": bundle_dir, **summary_of(spec)}
    if gpu is not None:
        result["baseline"] = baseline_for(bundle_dir, spec, problem, entry, index, device, gpu,
                                          job, model=model)
    return result


def jsonable_exact(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(jsonable_exact(v) for v in value)
    return False


def detect_stochastic(model, problem, device, pristine):
    """(outputs differ run to run on the same inputs, forward mutates its inputs)."""
    a = draw_inputs(problem, CHECK_SEED, device)
    b = draw_inputs(problem, CHECK_SEED, device)
    # Different generator states before the two calls: dropout-like ops draw different masks.
    torch.manual_seed(1000 + CHECK_SEED)
    out_a = run_eager(model, a)
    torch.manual_seed(2000 + CHECK_SEED)
    out_b = run_eager(model, b)
    mutated = not all(identical(x, y) for x, y in zip(a, pristine))
    return not compare_outputs(out_a, out_b)[0], mutated


def trace_and_check(problem, model, device, notes, staging):
    """Traces inputs.pt and reference.pt into `staging`, loads them back and checks them against
    eager on every seed; returns the problem.json fields that come from the check."""
    layout = problem.layout
    positions, names = layout.tensor_positions, layout.names
    display = problem.display
    dummy = torch.zeros(1, device=device)
    with torch.device(device):
        generator = trace_quietly(
            lambda: torch.jit.trace(InputGenerator(problem.get_inputs, positions, device),
                                    dummy, check_trace=False),
            display, "get_inputs()", [])
    generator.save(os.path.join(staging, "inputs.pt"))

    example_args = draw_inputs(problem, CHECK_SEED, device)
    example = tuple(example_args[i] for i in positions)
    wrapper = Reference(model, layout.arity, layout.constants)
    entries = state_entries(model)
    persistent = [name for name, _, _, keep in entries if keep]
    if persistent != list(model.state_dict().keys()):
        notes.append("the model customises state_dict: parameters follow module order instead")
    reference = trace_quietly(
        lambda: torch.jit.trace_module(wrapper, {"forward": example, "state": (dummy,)},
                                       check_trace=False),
        display, "forward", notes)
    reference.save(os.path.join(staging, "reference.pt"))
    del reference, wrapper, example, example_args

    # Loaded as kforge loads them: without map_location, which would also move the trace's
    # scalar constants (Python floats, kept on the CPU) to the GPU, where a binary op can no
    # longer pass them as kernel arguments and runs its slower broadcast path.
    loaded_generator = torch.jit.load(os.path.join(staging, "inputs.pt"))
    loaded_reference = torch.jit.load(os.path.join(staging, "reference.pt"))
    samples = {position: [] for position in positions}
    self_check = check_inputs = check_outputs = first_inputs = None
    for seed in (CHECK_SEED,) + EXTRA_SEEDS:
        torch.manual_seed(seed)
        # Unoptimised, as kforge runs it: a GPU fuser could contract `randn(...) * a + b` into
        # an FMA and round differently from eager get_inputs().
        with torch.no_grad(), torch.jit.optimized_execution(False):
            generated = list(loaded_generator(dummy))
        eager_args = draw_inputs(problem, seed, device)
        for k, position in enumerate(positions):
            if not identical(generated[k], eager_args[position]):
                raise Skip(f"the traced input generator does not reproduce get_inputs() for seed "
                           f"{seed} (input {names[position]} differs): get_inputs uses something "
                           "tracing cannot record")
            if len(samples[position]) < 2:
                samples[position].append(generated[k])
        if seed == CHECK_SEED:
            first_inputs = eager_args
        torch.manual_seed(100 + seed)
        eager_out = run_eager(model, eager_args)
        # The reference must see the same values eager saw, even if forward writes its inputs.
        traced_args = [t.clone() for t in generated] if layout.mutates else generated
        torch.manual_seed(100 + seed)
        with torch.no_grad(), torch.jit.optimized_execution(False):
            traced_out = tuple(loaded_reference(*traced_args))
        ok, diff = compare_outputs(eager_out, traced_out)
        if seed == CHECK_SEED:
            if not ok:
                raise Skip(f"the traced reference differs from eager on the inputs it was traced "
                           f"with (max abs diff {diff:.3g})")
            self_check = {"seed": seed, "passed": True, "max_abs_diff": diff,
                          "seeds_checked": [CHECK_SEED, *EXTRA_SEEDS]}
            check_outputs, check_inputs = eager_out, generated
        elif not ok:
            raise Skip(f"forward depends on input values in a way tracing cannot capture: the "
                       f"traced reference differs from eager on seed {seed} (max abs diff "
                       f"{diff:.3g})")
        del eager_args, eager_out, traced_out, traced_args

    with torch.no_grad():
        state = list(loaded_reference.state(dummy))
    if len(state) != len(entries):
        raise Skip("the traced reference lost parameters or buffers")

    inputs_spec = []
    for k, position in enumerate(positions):
        tensor = check_inputs[k]
        structure, value_range = describe_structure(samples[position])
        spec = {"name": names[position], "position": position, "shape": list(tensor.shape),
                "dtype": dtype_name(tensor.dtype)}
        if structure is not None:
            spec["structure"] = structure
        if value_range is not None:
            spec["observed_range"] = value_range
        inputs_spec.append(spec)
    del samples
    constants_spec = [{"position": p, "name": names[p], "value": jsonable(v)}
                      for p, v in sorted(layout.constants.items())]
    parameters_spec = []
    for name, tensor, kind, keep in entries:
        spec = {"name": name, "shape": list(tensor.shape), "dtype": dtype_name(tensor.dtype),
                "kind": kind}
        if kind == "buffer":
            spec["persistent"] = keep
        parameters_spec.append(spec)
    outputs_spec = [{"shape": list(o.shape), "dtype": dtype_name(o.dtype)} for o in check_outputs]

    unique_state = {t.data_ptr(): t for _, t, _, _ in entries if t.numel()}
    min_bytes = (sum(t.numel() * t.element_size() for t in check_inputs)
                 + sum(t.numel() * t.element_size() for t in unique_state.values())
                 + sum(o.numel() * o.element_size() for o in check_outputs))
    flops, flops_by_op = count_flops(model, first_inputs, notes)
    del first_inputs

    recorded = list(check_inputs) + list(check_outputs)
    recorded_bytes = sum(t.numel() * t.element_size() for t in recorded)
    expected = None
    if recorded_bytes <= EXPECTED_LIMIT_BYTES:
        holder = trace_quietly(lambda: torch.jit.trace(Recorded(recorded), dummy,
                                                       check_trace=False),
                               display, "expected", [])
        holder.save(os.path.join(staging, "expected.pt"))
        expected = {"seed": CHECK_SEED, "file": "expected.pt", "inputs": len(check_inputs),
                    "outputs": len(check_outputs)}
    else:
        notes.append(f"expected.pt not written: the check seed's inputs and outputs take "
                     f"{recorded_bytes / 2**20:.0f} MiB (limit {EXPECTED_LIMIT_BYTES >> 20} MiB)")
    return {"inputs": inputs_spec, "constants": constants_spec, "parameters": parameters_spec,
            "outputs": outputs_spec, "flops": flops, "flops_by_op": flops_by_op,
            "min_bytes": min_bytes,
            "self_check": self_check, "expected": expected}


def read_existing(bundle_dir):
    """The bundle's problem.json when every file it needs is there, else None."""
    try:
        with open(os.path.join(bundle_dir, "problem.json"), encoding="utf-8") as f:
            spec = json.load(f)
    except (OSError, ValueError):
        return None
    needed = ["reference.pt", "inputs.pt"]
    if spec.get("expected"):
        needed.append(spec["expected"]["file"])
    if not all(os.path.isfile(os.path.join(bundle_dir, name)) for name in needed):
        return None
    return spec


def summary_of(spec):
    return {"inputs": len(spec["inputs"]), "outputs": len(spec["outputs"]),
            "flops": spec["flops"], "min_bytes": spec["min_bytes"],
            "stochastic": spec["stochastic"], "notes": spec["notes"]}


def staging_dir(bundle_dir):
    parent = os.path.dirname(bundle_dir)
    os.makedirs(parent, exist_ok=True)
    path = os.path.join(parent, f".{os.path.basename(bundle_dir)}.staging-{os.getpid()}")
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def publish(staging, bundle_dir):
    """Replaces the bundle in one rename, so a reader never sees half a bundle. Baselines of the
    old content are stale and go with it."""
    old = None
    if os.path.exists(bundle_dir):
        old = f"{bundle_dir}.old-{os.getpid()}"
        os.rename(bundle_dir, old)
    os.rename(staging, bundle_dir)
    if old:
        shutil.rmtree(old, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# Baselines (GPU only): DESIGN.md §4


class Gpu:
    """The GPU's facts, measured once per run: DRAM bandwidth and peak rates."""

    def __init__(self):
        props = torch.cuda.get_device_properties(0)
        self.name = props.name
        self.slug = gpu_slug(props.name)
        self.l2_bytes = int(getattr(props, "L2_cache_size", 0)) or 50 * 2**20
        # ≥2× L2: writing it before each timed call evicts whatever the last call left.
        self.flush = torch.empty(max(2 * self.l2_bytes, 128 * 2**20) // 4, dtype=torch.float32,
                                 device="cuda")
        self.bandwidth = self.measure_bandwidth()
        self.peaks, self.peak_sources = self.measure_peaks()

    @staticmethod
    def time_ms(function, reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(reps):
            start.record()
            function()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)

    def measure_bandwidth(self):
        size = 2 * 2**30
        src = torch.ones(size // 4, dtype=torch.float32, device="cuda")
        dst = torch.empty_like(src)
        for _ in range(WARMUP_CALLS):
            dst.copy_(src)
        ms = self.time_ms(lambda: dst.copy_(src), 20)
        del src, dst
        torch.cuda.empty_cache()
        return 2 * size / (ms / 1e3)

    def measure_peaks(self):
        measured = {}
        n = 8192
        saved_tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            for name, dtype, tf32 in (("bfloat16", torch.bfloat16, False),
                                      ("float16", torch.float16, False),
                                      ("float32", torch.float32, False),
                                      ("tfloat32", torch.float32, True)):
                torch.backends.cuda.matmul.allow_tf32 = tf32
                a = torch.randn(n, n, device="cuda", dtype=dtype)
                b = torch.randn(n, n, device="cuda", dtype=dtype)
                for _ in range(WARMUP_CALLS):
                    torch.mm(a, b)
                ms = self.time_ms(lambda: torch.mm(a, b), 10)
                measured[name] = 2 * n**3 / (ms / 1e3)
                del a, b
        finally:
            torch.backends.cuda.matmul.allow_tf32 = saved_tf32
        torch.cuda.empty_cache()
        datasheet = next((peaks for key, peaks in DATASHEET_PEAKS.items() if key in self.name),
                         {})
        peaks, sources = {}, {}
        for dtype in sorted(set(measured) | set(datasheet)):
            m, d = measured.get(dtype, 0.0), datasheet.get(dtype, 0.0)
            peaks[dtype] = max(m, d)
            sources[dtype] = {"measured_matmul": m or None, "datasheet": d or None}
        return peaks, sources


def timing_stats(times):
    return {"median_ms": statistics.median(times), "mean_ms": statistics.fmean(times),
            "min_ms": min(times), "max_ms": max(times),
            "stddev_ms": statistics.stdev(times) if len(times) > 1 else 0.0,
            "calls": len(times)}


def time_interleaved(functions, input_sets, gpu):
    """Median-ready times per function: warm-ups, then TIMED_CALLS rounds, each round timing
    every function once on the next input set after flushing L2 (CUDA events, one sync each)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = {name: [] for name in functions}
    with torch.no_grad():
        for name, function in functions.items():
            for k in range(WARMUP_CALLS):
                function(input_sets[k % len(input_sets)])
        torch.cuda.synchronize()
        for i in range(TIMED_CALLS):
            args = input_sets[i % len(input_sets)]
            for name, function in functions.items():
                gpu.flush.zero_()
                start.record()
                function(args)
                end.record()
                end.synchronize()
                times[name].append(start.elapsed_time(end))
    return {name: timing_stats(t) for name, t in times.items()}


def baseline_for(bundle_dir, spec, problem, entry, index, device, gpu, job, model=None):
    """Measures (or reuses) baselines/<gpu>.json; returns the result event's baseline fields."""
    if device != "cuda":
        return {"status": "skipped", "reason": f"bundle traced on {device}"}
    path = os.path.join(bundle_dir, "baselines", f"{gpu.slug}.json")
    if not job.get("rebaseline"):
        try:
            with open(path, encoding="utf-8") as f:
                old = json.load(f)
            if old.get("content_hash") == spec["content_hash"]:
                return {"status": "reused", **brief(old)}
        except (OSError, ValueError):
            pass
    try:
        if model is None:
            execute_problem(problem, entry["path"], index)
            model = build_model(problem, "cuda")[1]
        baseline = measure_baseline(bundle_dir, spec, gpu, model)
    except (Skip, ProblemTimeout):
        raise
    except Exception as e:
        torch.cuda.empty_cache()
        return {"status": "failed", "reason": f"{type(e).__name__}: {first_line(e)}"}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(finite(baseline), f, indent=2)
        f.write("\n")
    os.replace(path + ".tmp", path)
    return {"status": "measured", **brief(baseline)}


def brief(baseline):
    return {key: baseline.get(key) for key in ("eager_ms", "compile_ms", "reference_ms",
                                               "floor_ms", "floor_bound", "compile_error")}


def compute_floor_ms(spec, flops_dtype, peaks):
    """Σ FLOPs / peak over the counted ops. In fp32, PyTorch runs convolutions on TF32 tensor
    cores by default (cudnn.allow_tf32) and matmuls only when matmul.allow_tf32 is set; those
    ops get the TF32 rate, so the floor stays below what the reference itself achieves."""
    by_op = spec.get("flops_by_op") or {"": spec["flops"]}
    total = 0.0
    for op, flops in by_op.items():
        rate = peaks.get(flops_dtype)
        if flops_dtype == "float32":
            conv = "conv" in op and torch.backends.cudnn.allow_tf32
            matmul = any(k in op for k in ("mm", "matmul", "linear", "attention")) and \
                torch.backends.cuda.matmul.allow_tf32
            if conv or matmul:
                rate = peaks.get("tfloat32", rate)
        if rate:
            total += flops / rate * 1e3
    return total


def measure_baseline(bundle_dir, spec, gpu, model):
    if spec["eval_mode"]:
        model.eval()
    generator = torch.jit.load(os.path.join(bundle_dir, "inputs.pt"))
    reference = torch.jit.load(os.path.join(bundle_dir, "reference.pt"))
    dummy = torch.zeros(1, device="cuda")
    input_bytes = sum(math.prod(i["shape"]) * torch.empty((), dtype=getattr(torch, i["dtype"]))
                      .element_size() for i in spec["inputs"])
    free, _total = torch.cuda.mem_get_info()
    sets = max(1, min(INPUT_SETS, int(0.4 * free) // max(input_bytes, 1)))
    input_sets = []
    for k in range(sets):
        torch.manual_seed(1000 + k)
        with torch.no_grad(), torch.jit.optimized_execution(False):
            input_sets.append(list(generator(dummy)))
    constants = {c["position"]: c["value"] for c in spec["constants"]}
    arity = len(spec["inputs"]) + len(spec["constants"])
    constants = {p: tuple(v) if isinstance(v, list) else v for p, v in constants.items()}

    def eager(tensors):
        args, remaining = [], iter(tensors)
        for position in range(arity):
            args.append(constants[position] if position in constants else next(remaining))
        return model(*args)

    def traced(tensors):
        with torch.jit.optimized_execution(False):
            return reference(*tensors)

    functions = {"eager": eager, "reference": traced}
    compile_error, compile_seconds = None, None
    torch._dynamo.reset()
    compiled = torch.compile(eager)
    try:
        started = time.monotonic()
        with torch.no_grad():
            compiled(input_sets[0])
        torch.cuda.synchronize()
        compile_seconds = time.monotonic() - started
        functions["compile"] = compiled
    except Exception as e:
        compile_error = f"{type(e).__name__}: {first_line(e)}"
    stats = time_interleaved(functions, input_sets, gpu)
    torch._dynamo.reset()

    dtypes = [i["dtype"] for i in spec["inputs"]] + [p["dtype"] for p in spec["parameters"]]
    float_dtypes = [d for d in dtypes if d in ("float32", "float16", "bfloat16", "float64")]
    flops_dtype = float_dtypes[0] if float_dtypes else "float32"
    memory_floor = spec["min_bytes"] / gpu.bandwidth * 1e3
    compute_floor = compute_floor_ms(spec, flops_dtype, gpu.peaks)
    return {
        "format_version": FORMAT_VERSION,
        "gpu": gpu.name,
        "gpu_slug": gpu.slug,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "content_hash": spec["content_hash"],
        "torch": torch.__version__,
        "protocol": {"warmup_calls": WARMUP_CALLS, "timed_calls": TIMED_CALLS,
                     "input_sets": sets, "l2_flush_bytes": gpu.flush.numel() * 4,
                     "timer": "cuda events, synchronize after each call", "no_grad": True,
                     "allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
                     "allow_tf32_cudnn": torch.backends.cudnn.allow_tf32},
        "eager_ms": stats["eager"]["median_ms"],
        "compile_ms": stats["compile"]["median_ms"] if "compile" in stats else None,
        "reference_ms": stats["reference"]["median_ms"],
        "eager": stats["eager"],
        "compile": stats.get("compile"),
        "reference": stats["reference"],
        "compile_seconds": compile_seconds,
        "compile_error": compile_error,
        "bandwidth_bytes_per_s": gpu.bandwidth,
        "peak_flops_per_s": gpu.peaks,
        "peak_sources": gpu.peak_sources,
        "flops_dtype": flops_dtype,
        "memory_floor_ms": memory_floor,
        "compute_floor_ms": compute_floor,
        "floor_ms": max(memory_floor, compute_floor),
        "floor_bound": "compute" if compute_floor > memory_floor else "memory",
    }


# ---------------------------------------------------------------------------------------------
# The batch


def on_alarm(_signum, _frame):
    raise ProblemTimeout()


def run_job(job):
    cuda = torch.cuda.is_available()
    device = job.get("device") or ("cuda" if cuda else "cpu")
    if device == "cuda" and not cuda:
        emit(event="fatal", message="--device cuda, but torch sees no GPU on this machine")
        return 2
    mode = job.get("baselines", "auto")
    gpu, baseline_note = None, None
    if mode == "off":
        baseline_note = "not requested (--no-baselines)"
    elif not cuda:
        baseline_note = "no GPU on this machine"
    elif device != "cuda":
        baseline_note = "bundles traced on cpu (--device cpu)"
    else:
        gpu = Gpu()
    emit(event="ready", torch=torch.__version__, python=platform.python_version(),
         device=device, gpu=gpu.name if gpu else None,
         baselines=baseline_note is None, baselines_reason=baseline_note,
         bandwidth_bytes_per_s=gpu.bandwidth if gpu else None)
    signal.signal(signal.SIGALRM, on_alarm)
    seen_sizes = set()
    timeout = int(job.get("problem_timeout_s") or 0)
    for index, entry in enumerate(job["problems"]):
        shown = entry.get("display", entry["path"])
        emit(event="start", index=index, file=shown, name=entry["name"])
        started = time.monotonic()
        if timeout:
            signal.alarm(timeout)
        try:
            result = export_problem(entry, job, device, index, gpu, seen_sizes)
        except Skip as skip:
            result = {"status": "skipped", "reason": str(skip)}
        except ProblemTimeout:
            result = {"status": "skipped", "reason": f"timed out after {timeout} s"}
        except Exception as e:
            traceback.print_exc()
            result = {"status": "skipped",
                      "reason": f"exporter error: {type(e).__name__}: {first_line(e)}"}
        finally:
            signal.alarm(0)
            sys.modules.pop(f"kforge_problem_{index}", None)
            gc.collect()
            if cuda:
                torch.cuda.empty_cache()
        emit(event="result", index=index, file=shown, name=entry["name"],
             seconds=round(time.monotonic() - started, 2), **result)
    emit(event="done", unused_sizes=sorted(set(job["sizes"]) - seen_sizes))
    return 0


EXPORTER_DIGEST = exporter_digest()


def main(argv=None):
    global EVENTS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="problem files (when not using --job)")
    parser.add_argument("--job", help="a JSON job file written by kforge import")
    parser.add_argument("--out", default="bundles")
    parser.add_argument("--size", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--level", type=int)
    parser.add_argument("--device", choices=["cuda", "cpu"])
    parser.add_argument("--no-baselines", action="store_true")
    parser.add_argument("--rebaseline", action="store_true")
    parser.add_argument("--timeout", type=int, default=0, help="seconds per problem (0: none)")
    args = parser.parse_args(argv)
    if args.job:
        with open(args.job, encoding="utf-8") as f:
            job = json.load(f)
    else:
        if not args.files:
            parser.error("give problem files or --job")
        job = {"problems": [{"path": os.path.abspath(p), "display": p,
                             "name": os.path.splitext(os.path.basename(p))[0],
                             "level": args.level} for p in args.files],
               "out": args.out, "sizes": dict(s.split("=", 1) for s in args.size),
               "device": args.device, "baselines": "off" if args.no_baselines else "auto",
               "rebaseline": args.rebaseline, "problem_timeout_s": args.timeout,
               "single": len(args.files) == 1}
    try:
        job["sizes"] = {k.strip(): parse_size_value(v) for k, v in job.get("sizes", {}).items()}
    except ValueError as e:
        print(f"export.py: {e}", file=sys.stderr)
        return 2
    job["out"] = os.path.abspath(job["out"])
    # Problem code may print; only events go to the real stdout.
    EVENTS = sys.stdout
    sys.stdout = sys.stderr
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    return run_job(job)


if __name__ == "__main__":
    sys.exit(main())
