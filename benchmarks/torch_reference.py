#!/usr/bin/env python3
"""torch_reference.py — the PyTorch side of benchmarks/run_gpu.sh: the same workloads as the
bench_gpu_* programs, measured the way the reference notes do and the best way PyTorch allows,
in the same call. Prints one "REF bench=NAME key=value ..." line per workload.

Timing: CUDA-synchronised host wall clock around each repetition (what a user waits, as weft's
benchmarks measure), warm-up first, median of the repetitions. fp32 products are exact (TF32 off).

Usage: torch_reference.py [--only NAME[,NAME...]] [--device N]
"""
import argparse
import statistics
import sys
import time

import torch


def wall(fn, reps, warm=2):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        t.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(t)


def ref(bench, **kv):
    print("REF bench=%s %s" % (bench, " ".join("%s=%.6g" % (k, v) for k, v in kv.items())), flush=True)


def overlap_and_memory(dev, n=4000, count=50, reps=5):
    x = torch.rand(n, n, device=dev)
    run = lambda: [x.mm(x) for _ in range(count)]
    compute = wall(run, reps)
    src = torch.rand(n, n, device=dev)
    pinned = [torch.empty(n, n, pin_memory=True) for _ in range(count)]

    def copies():
        for h in pinned:
            h.copy_(src, non_blocking=True)

    copy_ms = wall(copies, reps)

    def notes():  # the reference notes' code: run, then copy_to_cpu(non_blocking=True) (pageable)
        y = run()
        return [v.to("cpu", non_blocking=True) for v in y]

    notes_ms = wall(notes, 3, warm=1)
    stream = torch.cuda.Stream(device=dev)

    def hand():  # the best hand-written overlap: a copy stream, pinned buffers, events
        for i in range(count):
            y = x.mm(x)
            ev = torch.cuda.Event()
            ev.record()
            with torch.cuda.stream(stream):
                stream.wait_event(ev)
                pinned[i].copy_(y, non_blocking=True)
                y.record_stream(stream)
        torch.cuda.current_stream().wait_stream(stream)

    hand_ms = wall(hand, reps)
    bound = max(compute, copy_ms)
    ref("overlap", compute_ms=compute, copies_ms=copy_ms, notes_ms=notes_ms, hand_ms=hand_ms,
        notes_ratio=notes_ms / bound, ratio=hand_ms / bound)
    buf = n * n * 4
    del pinned
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(dev)
    y = run()
    h = [v.to("cpu", non_blocking=True) for v in y]
    torch.cuda.synchronize()
    notes_peak = torch.cuda.max_memory_allocated(dev) / buf
    del y, h
    torch.cuda.empty_cache()
    pinned = [torch.empty(n, n, pin_memory=True) for _ in range(count)]
    torch.cuda.reset_peak_memory_stats(dev)
    hand()
    torch.cuda.synchronize()
    hand_peak = torch.cuda.max_memory_allocated(dev) / buf
    ref("memory", notes_buffers=notes_peak, hand_buffers=hand_peak)


def multi_gpu(n=4000, count=50, reps=5):
    g = torch.cuda.device_count()
    if g < 2:
        return
    xs = [torch.rand(n, n, device="cuda:%d" % d) for d in range(g)]

    def par():
        for x in xs:
            [x.mm(x) for _ in range(count)]
        for d in range(g):
            torch.cuda.synchronize(d)

    def seq():
        for d, x in enumerate(xs):
            [x.mm(x) for _ in range(count)]
            torch.cuda.synchronize(d)

    def sync_all():
        for d in range(g):
            torch.cuda.synchronize(d)

    p = wall(par, reps)
    s = wall(seq, reps)
    sync_all()
    ref("multi_gpu", gpus=g, sequential_ms=s, parallel_ms=p, speedup=s / p)


def small_ops(dev, n=400, count=50, reps=21):
    x1 = torch.randn(n, n, device=dev)
    x2 = torch.randn(n, n, device=dev)
    run = lambda x: [x.mm(x) for _ in range(count)]

    def both():
        run(x1)
        run(x2)

    eager = wall(both, reps, warm=3)
    s = torch.cuda.Stream(device=dev)
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        both()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        both()
    graph = wall(g.replay, reps, warm=3)
    ref("small_ops", eager_ms=eager, graph_ms=graph)


def dispatch(dev, count=10000, reps=7):
    x = torch.zeros(1, device=dev)

    def loop():
        for _ in range(count):
            x.add_(1)

    eager = wall(loop, reps)
    s = torch.cuda.Stream(device=dev)
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        loop()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        loop()
    graph = wall(g.replay, reps)
    ref("dispatch", eager_us_per_op=eager * 1e3 / count, graph_us_per_op=graph * 1e3 / count)


def sync_logging(dev, n=100, count=1000, reps=7):
    def every():
        a = torch.rand(n, n, device=dev)
        for _ in range(count):
            a = torch.mm(a, a)
            torch.norm(a).item()  # logged: read back each step

    def once():
        a = torch.rand(n, n, device=dev)
        for _ in range(count):
            a = torch.mm(a, a)
        torch.norm(a).item()

    e = wall(every, reps)
    o = wall(once, reps)
    ref("sync_logging", every_ms=e, once_ms=o, ratio=e / o)


def gemm_rate(dev, n=4000, reps=21):
    a = torch.rand(n, n, device=dev) * 2 - 1
    ms = wall(lambda: torch.mm(a, a), reps, warm=3)
    ref("gemm_rate", torch_ms=ms, torch_tflops=2.0 * n ** 3 / ms / 1e9)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--device", type=int, default=0)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("SKIP torch_reference: no CUDA GPU", flush=True)
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda:%d" % args.device)
    torch.cuda.set_device(dev)
    only = set(filter(None, args.only.split(",")))
    todo = [("overlap", lambda: overlap_and_memory(dev)), ("multi_gpu", multi_gpu),
            ("small_ops", lambda: small_ops(dev)), ("dispatch", lambda: dispatch(dev)),
            ("sync_logging", lambda: sync_logging(dev)), ("gemm_rate", lambda: gemm_rate(dev))]
    print("REF bench=device name=0 %s" % torch.cuda.get_device_name(dev).replace(" ", "_"), flush=True)
    for name, fn in todo:
        if not only or name in only:
            fn()
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
