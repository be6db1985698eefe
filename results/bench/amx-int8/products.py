import time, torch, sys
sys.path.insert(0, ".")
from active_rag import kernels
from tests.unit_tests.test_decode_kernel import _int4_weights, _int8_weights
torch.set_num_threads(2)
def best(f, reps=3):
    f(); ts=[]
    for _ in range(reps):
        t0=time.perf_counter(); f(); ts.append(time.perf_counter()-t0)
    return min(ts)
for (n, k) in [(8960, 1536), (1536, 8960), (1536, 1536)]:
    codes, step, zero, w = _int4_weights(n, k)
    t4, s4 = kernels.pack_int4(codes, step, zero)
    q, sc, _ = _int8_weights(n, k)
    t8 = kernels.pack_int8(q)
    wb = torch.empty(n, k, dtype=torch.bfloat16)
    for rows in [64, 256, 939]:
        x = torch.randn(rows, k)
        flop = 2 * rows * n * k / 1e9
        r = {}
        r["amx4"] = best(lambda: kernels.int4_gemm(x, t4, s4, n, "amx"))
        r["vnni4"] = best(lambda: kernels.int4_gemm(x, t4, s4, n, "avx512-vnni"))
        r["amx8"] = best(lambda: kernels.int8_gemm(x, t8, sc, n, "amx"))
        r["vnni8"] = best(lambda: kernels.int8_gemm(x, t8, sc, n, "avx512-vnni"))
        xb = x.bfloat16()
        r["dense4"] = best(lambda: torch.nn.functional.linear(xb, kernels.int4_dequant(t4, s4, wb)))
        print(f"{n}x{k} rows {rows}: " + "  ".join(f"{k_} {flop/v:6.0f} GF/s" for k_, v in r.items()), flush=True)
