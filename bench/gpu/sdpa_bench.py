#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on the shapes of gpu_bench's BM_PrefillAttention.

bench/gpu.sh runs this beside gpu_bench on the same GPU: causal self-attention of one prompt of
1k, 8k and 32k tokens, Llama-3-8B's shape (32 query heads, 8 KV heads, head dim 128), BF16,
contiguous [batch, heads, tokens, head_dim] tensors with K and V expanded to the 32 query heads
(PyTorch's fused kernels take equal head counts; the expansion is not timed). It times the
backend PyTorch picks by itself, names it, and times each fused backend forced alone as well.
FLOPs are counted as gpu_bench counts them: 4 * heads * head_dim * N (N + 1) / 2.

Prints one JSON object: {"torch": version, "device": name, "runs": [{"tokens", "backend",
"picked", "median_ms", "tflops"}]}.
"""
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128
FUSED = [SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]


def picked_backend(q, k, v):
    """The backend SDPA dispatches to for these inputs, by PyTorch's own selection function."""
    try:
        choice = int(torch._fused_sdp_choice(q, k, v, is_causal=True))
        for name, b in SDPBackend.__members__.items():
            if int(b) == choice:
                return name
        return str(choice)
    except Exception as e:  # a private function: report rather than fail
        return "unknown (%s)" % e


def time_ms(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]


def main():
    sizes = [int(a) for a in sys.argv[1:]] or [1024, 8192, 32768]
    torch.manual_seed(0)
    runs = []
    for n in sizes:
        q = torch.randn(1, HEADS, n, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        kv = [torch.randn(1, KV_HEADS, n, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
              for _ in range(2)]
        k, v = [t.repeat_interleave(HEADS // KV_HEADS, dim=1).contiguous() for t in kv]
        flops = 4.0 * HEADS * HEAD_DIM * n * (n + 1) / 2
        iters = 20 if n >= 32768 else 50
        picked = picked_backend(q, k, v)

        def run():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

        ms = time_ms(run, iters)
        runs.append({"tokens": n, "backend": "default", "picked": picked, "median_ms": ms,
                     "tflops": flops / ms / 1e9})
        for backend in FUSED:
            try:
                with sdpa_kernel([backend]):
                    ms = time_ms(run, iters)
                runs.append({"tokens": n, "backend": backend.name, "picked": picked,
                             "median_ms": ms, "tflops": flops / ms / 1e9})
            except RuntimeError as e:  # not available for this input or build
                runs.append({"tokens": n, "backend": backend.name, "picked": picked,
                             "error": str(e).splitlines()[0][:200]})
        del q, k, v, kv
        torch.cuda.empty_cache()
    print(json.dumps({"torch": torch.__version__, "device": torch.cuda.get_device_name(),
                      "runs": runs}))


if __name__ == "__main__":
    main()
