"""bench/gpu_profile.py's table, on the CPU: the classes of real kernel names, the steps cut out of a whole-run
trace, the time by class and idle from nsys's CSV, the CUPTI tracer's CSV and a torch.profiler trace, and
bench/gpu_profile.sh in its CPU mode end to end.

  profile_test.py --build-dir BUILD --python PYTHON

1. KERNEL_CLASSES puts the names that cuBLAS, PyTorch's attention kernels, cuDNN, ATen and Inductor give their
   kernels (and the CPU's aten:: ops) in the class they are;
2. a synthetic 7-step trace (steps 1-4 slower, two AdamW kernels ending each step, a memcpy starting it, two
   kernels on another stream overlapping, idle gaps) read as nsys's cuda_gpu_trace CSV, as cupti_kernel_trace's
   CSV and as a torch.profiler Chrome trace gives, over steps 5-7, exactly the time by class, idle and overlap
   the trace was built with (and the CUPTI tracer's dropped records); the elementwise class's kinds
   (ELEMENTWISE_KINDS) of real kernel names, summing to the class;
3. bench/gpu_profile.sh with BENCH_DEVICE=cpu profiles the eager and compiled loops (a tiny GPT-2) and says why
   segtrain (and segtrain_all, SEGTRAIN_FUSED_KERNELS=all) is not profiled on the CPU: profile.md and
   profile.json with 3 steps each, every class's time and idle summing to the window;
4. bench/cupti_kernel_trace.cpp builds against the CUPTI found here and exports InitializeInjection (when this
   machine has a CUPTI; said otherwise);
5. `gpu_profile.py run --until T` starts no program that would not finish by T (each said, in profile.json),
   a program expected to take the longest so far (a fake clock);
6. a SIGTERM to `gpu_profile.py run` (what the caller's timeout sends) ends the program being profiled with it,
   exits 143 and leaves profile.json with the programs that finished.
"""
import argparse
import csv
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from checks import check, finish  # noqa: E402
sys.path.insert(0, str(ROOT / "bench"))


NAMES = {
    "GEMM": [
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
        "nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NNT",
        "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn",
        "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8::Params)",
        "void gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, float, 128, 16, 4, 4, false, false>(cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<__nv_bfloat16 const>, cublasGemvTensorStridedBatched<__nv_bfloat16 const>, cublasGemvTensorStridedBatched<__nv_bfloat16>, float>, float, float)",
        "void splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, true, false, false>(cublasSplitKParams<float>, float const*, __nv_bfloat16 const*, __nv_bfloat16*, float const*, float const*, __nv_bfloat16 const*, float const*, __nv_bfloat16*, void*, long, float*, int*)",
        "triton_tem_fused_mm_0", "aten::addmm", "aten::mm",
    ],
    "attention": [
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 64, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false>(pytorch_flash::Flash_fwd_params)",
        "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<64, 128, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 128, 8, cutlass::bfloat16_t> >, false, true, false, false, false, true, false>(pytorch_flash::Flash_bwd_params)",
        "fmha_cutlassB_bf16_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<cutlass::arch::Sm80, cutlass::bfloat16_t, true, false, false, 64, 64, 64, false>::Params)",
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x64x128_4x1x1_kernel0_0",
        "aten::_scaled_dot_product_flash_attention_for_cpu",
    ],
    "norm": [
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float, false>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)",
        "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<c10::BFloat16, float, 32u, 32u, 256u, false, true, false>(long, long, c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, c10::BFloat16*, c10::BFloat16*)",
        "triton_red_fused__to_copy_add_native_layer_norm_0", "aten::native_layer_norm",
        # segtrain's own (kernels/residual_norm_cuda.cu, SEGTRAIN_FUSED_KERNELS=all)
        "void segtrain::kernels::(anonymous namespace)::add_norm_forward_kernel<c10::BFloat16, 1, true>(c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16*, c10::BFloat16*, float*, float*, long, float)",
        "void segtrain::kernels::(anonymous namespace)::add_norm_backward_kernel<c10::BFloat16, 4, false>(c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, c10::BFloat16 const*, c10::BFloat16*, long)",
        "void segtrain::kernels::(anonymous namespace)::norm_weight_partials_kernel<c10::BFloat16, 8, true>(c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, float*, float*, long, long, long)",
    ],
    "loss": [
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, float, float, float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)",
        "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*, float*, float const*, long const*, float const*, bool, long, long, long, long)",
        "triton_per_fused__log_softmax_backward_data_nll_loss_backward_0", "aten::_log_softmax",
        # segtrain's own (kernels/cross_entropy_cuda.cu, SEGTRAIN_FUSED_KERNELS=1)
        "void segtrain::kernels::(anonymous namespace)::cross_entropy_kernel<c10::BFloat16>(c10::BFloat16*, long const*, float*, long, long, long, bool)",
    ],
    "optimizer": [
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, double*, double, double, double, double, double, bool, float*, float*>(at::native::(anonymous namespace)::FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, double*, double, double, double, double, double, bool, float*, float*)",
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::LpNormFunctor<float, (at::native::(anonymous namespace)::NormType)1, float, float>, float*, int>(at::native::(anonymous namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::LpNormFunctor<float, (at::native::(anonymous namespace)::NormType)1, float, float>, float*, int)",
        "aten::_fused_adamw_", "aten::_foreach_norm",
    ],
    "elementwise": [
        "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul>)",
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4>)",
        "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<c10::BFloat16 const, unsigned int>, at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, unsigned int, unsigned int, long)",
        "triton_poi_fused_add_gelu_0", "aten::gelu", "aten::add",
        # segtrain's own (kernels/swiglu_cuda.cu, SEGTRAIN_FUSED_KERNELS=1)
        "void segtrain::kernels::(anonymous namespace)::swiglu_backward_kernel<c10::BFloat16>(c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16*, c10::BFloat16*, long)",
        # the column sums (kernels/bias_gradient_cuda.cu, kernels/column_partials.cuh, SEGTRAIN_FUSED_KERNELS=all)
        "void segtrain::kernels::(anonymous namespace)::column_partials_kernel<c10::BFloat16, 8, (segtrain::kernels::(anonymous namespace)::RowTransform)2>(c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16*, float*, long, long, long)",
        "void segtrain::kernels::sum_partials_kernel<c10::BFloat16>(float const*, segtrain::kernels::PartialSumOutputs<c10::BFloat16>, long, long)",
    ],
    "memory": ["Memcpy HtoD (Pinned -> Device)", "[CUDA memcpy Host-to-Device]", "Memset (Device)",
               "[CUDA memset]"],
}

# One step of the synthetic trace: (name, start offset, duration) in microseconds; ADAM ends it.
GEMM, FLASH, NORM = NAMES["GEMM"][0], NAMES["attention"][0], NAMES["norm"][0]
GELU, LOSS, ADAM = NAMES["elementwise"][0], NAMES["loss"][0], NAMES["optimizer"][0]
NVJET = NAMES["GEMM"][1]


def step_events(slow):
    gemm = 1000 if slow else 100
    return [("Memcpy HtoD", 0, 5), (GEMM, 10, gemm), (FLASH, 10 + gemm, 40), (NORM, 60 + gemm, 10),
            (GELU, 75 + gemm, 8), (NVJET, 80 + gemm, 50),  # NVJET overlaps GELU by 3 us (another stream)
            (LOSS, 140 + gemm, 12), (ADAM, 160 + gemm, 20), (ADAM, 185 + gemm, 20)]


GAP = 50  # idle between a step's last AdamW and the next step's memcpy


def synthetic_trace():
    """7 steps, 1-4 with slow GEMMs, GAP us idle after each: [(name, start_us, end_us)], and what steps 5-7
    hold: us by class a step, the window a step (the gap before the step, then the step to its last AdamW),
    the busy time a step (the union of its intervals)."""
    events, t = [], 1000.0
    for step in range(7):
        for name, offset, duration in step_events(step < 4):
            events.append((name, t + offset, t + offset + duration))
        t = max(e for _, _, e in events) + GAP
    per_step = {"GEMM": 100 + 50, "attention": 40, "norm": 10, "elementwise": 8, "loss": 12, "optimizer": 40,
                "memory": 5, "other": 0}
    step_span = GAP + 185 + 100 + 20
    busy = 5 + 100 + 40 + 10 + (8 + 50 - 3) + 12 + 20 + 20
    return events, per_step, step_span, busy


def write_nsys(path, events):
    with open(path, "w", newline="") as f:
        f.write("Generating SQLite file x.sqlite from x.nsys-rep\nProcessing [x.sqlite] with [cuda_gpu_trace.py]...\n\n")
        w = csv.writer(f)
        w.writerow(["Start (ns)", "Duration (ns)", "CorrId", "GrdX", "Strm", "Name"])
        for name, s, e in events:
            w.writerow([int(s * 1000), int((e - s) * 1000), 1, 1, 7, name if not name.startswith("Memcpy")
                        else "[CUDA memcpy Host-to-Device]"])


def write_cupti(path, events):
    with open(path, "w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_MINIMAL)
        w.writerow(["kind", "start_ns", "end_ns", "name"])
        for name, s, e in events:
            w.writerow(["memcpy" if name.startswith("Memcpy") else "kernel", int(s * 1000), int(e * 1000), name])
        w.writerow(["dropped", 0, 0, 5])


def write_chrome(path, events):
    """The last 3 steps as torch.profiler records them (its window starts at a step's start), with CPU ops
    that the GPU table must leave out."""
    starts = [s for name, s, e in events if name.startswith("Memcpy")]
    kept = [ev for ev in events if ev[1] >= starts[4]]
    trace = [{"ph": "X", "cat": "kernel" if not n.startswith("Memcpy") else "gpu_memcpy", "name": n, "ts": s,
              "dur": e - s, "pid": 0, "tid": 7} for n, s, e in kept]
    trace += [{"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "ts": s, "dur": 5000, "pid": 1, "tid": 1}
              for _, s, _ in kept[:3]]
    pathlib.Path(path).write_text(json.dumps({"traceEvents": trace}))


def check_profile(label, p, per_step, step_span, busy, steps=3, lead=GAP):
    """lead: the idle the window has before its first step (a whole-run trace: the gap after the step before
    it; a torch.profiler trace starts at its first activity, so 0 there)."""
    check(p.get("steps") == steps, f"{label}: {p.get('steps')} steps in the window")
    for cls, us in per_step.items():
        got = p["ms"][cls]
        check(abs(got - steps * us / 1e3) < 1e-6, f"{label}: {cls} {got} ms = {steps} x {us} us")
    window = steps * step_span - (GAP - lead)
    check(abs(p["window_ms"] - window / 1e3) < 1e-6, f"{label}: window {p['window_ms']} ms = {window} us")
    check(abs(p["idle_ms"] - (window - steps * busy) / 1e3) < 1e-6,
          f"{label}: idle {p['idle_ms']} ms = {window - steps * busy} us")
    check(abs(p["overlap_ms"] - steps * 3 / 1e3) < 1e-6, f"{label}: overlap {p['overlap_ms']} ms (3 us a step)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    import gpu_profile as gp

    # 1. classes
    for cls, names in NAMES.items():
        for name in names:
            got = gp.classify(name)
            check(got == cls, f"{name[:70]} -> {got} (expected {cls})")
    check(gp.classify("some_new_kernel_name") == "other", "an unknown name is 'other'")
    # the elementwise class by kind: real names of the kernels of a GPT-2 step
    kinds = {
        NAMES["elementwise"][0]: "activation", NAMES["elementwise"][1]: "reduction",
        NAMES["elementwise"][2]: "gather or index", "triton_poi_fused_add_gelu_0": "fused pointwise",
        "triton_red_fused_sum_3": "reduction", NAMES["elementwise"][6]: "activation", "aten::add": "arithmetic",
        "void at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(float)#2}": "copy or cast",
        "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::"
        "{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>,"
        " 4, TrivialOffsetCalculator<1, unsigned int>>": "copy or cast",
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<c10::BFloat16>, "
        "std::array<char*, 1ul> >(int, at::native::FillFunctor<c10::BFloat16>, std::array<char*, 1ul>)": "fill or zero",
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
        "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)": "arithmetic",
        "void segtrain::kernels::(anonymous namespace)::rope_kernel<c10::BFloat16, c10::BFloat16>": "rope",
        "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::masked_fill_kernel("
        "at::TensorIterator&, c10::Scalar const&)::{lambda()#1}::operator()() const::{lambda(c10::BFloat16, bool)#1}, "
        "std::array<char*, 3ul> >": "arithmetic",
        "void at::native::elementwise_kernel<128, 2, some_lambda>": "other elementwise",
        NAMES["elementwise"][7]: "reduction", NAMES["elementwise"][8]: "reduction",
    }
    for name, kind in kinds.items():
        check(gp.classify(name) == "elementwise", f"{name[:60]} is elementwise")
        got = gp.elementwise_kind(name)
        check(got == kind, f"{name[:70]} -> {got} (expected {kind})")

    with tempfile.TemporaryDirectory(prefix="profile-test-") as d:
        # 2. the three trace formats
        events, per_step, step_span, busy = synthetic_trace()
        write_nsys(f"{d}/nsys.csv", events)
        write_cupti(f"{d}/cupti.csv", events)
        write_chrome(f"{d}/chrome.json", events)
        nsys = gp.profile_of("nsys", f"{d}/nsys.csv", gp.SKIP_STEPS, gp.PROFILE_STEPS)
        check_profile("nsys CSV, steps 5-7 of 7", nsys, per_step, step_span, busy)
        check(abs(nsys["elementwise_ms"]["activation"] - 3 * 8 / 1e3) < 1e-6 and
              abs(sum(nsys["elementwise_ms"].values()) - nsys["ms"]["elementwise"]) < 1e-6,
              f"the elementwise kinds sum to the class: {nsys['elementwise_ms']}")
        cupti = gp.profile_of("cupti", f"{d}/cupti.csv", gp.SKIP_STEPS, gp.PROFILE_STEPS)
        check_profile("CUPTI CSV, steps 5-7 of 7", cupti, per_step, step_span, busy)
        check(cupti.get("dropped_records") == 5, "the CUPTI tracer's dropped records are reported")
        chrome = gp.profile_of("chrome", f"{d}/chrome.json", 0, None)
        check(chrome["kind"] == "gpu", "a trace with GPU kernels is read for them, its CPU ops left out")
        check_profile("torch.profiler trace, its 3 steps", chrome, per_step, step_span, busy, lead=0)
        whole = gp.profile_of("nsys", f"{d}/nsys.csv", 0, None)
        check(whole["steps"] == 7 and abs(whole["ms"]["GEMM"] - (4 * 1050 + 3 * 150) / 1e3) < 1e-6,
              f"skip 0: all 7 steps ({whole['ms']['GEMM']} ms of GEMM)")
        table = subprocess.run([args.python, str(ROOT / "bench/gpu_profile.py"), "table", "--skip", "4", "--steps",
                                "3", f"segtrain=nsys:{d}/nsys.csv", f"eager=chrome:{d}/chrome.json"],
                               capture_output=True, text=True)
        check(table.returncode == 0 and "| GEMM | 0.15 ms (" in table.stdout and "| **idle** |" in table.stdout
              and "| activation | 0.01 ms |" in table.stdout,
              f"gpu_profile.py table prints the markdown table {table.stderr[-500:]}")

        # 3. the CPU mode end to end
        env = dict(os.environ, BUILD_DIR=args.build_dir, BENCH_PYTHON=args.python, BENCH_DEVICE="cpu")
        started = time.time()
        proc = subprocess.run(["bash", str(ROOT / "bench/gpu_profile.sh"), "--out", f"{d}/out", "--deadline", "200"],
                              env=env, capture_output=True, text=True, cwd=ROOT)
        print(f"bench/gpu_profile.sh on the CPU: {time.time() - started:.1f} s, exit {proc.returncode}")
        report = pathlib.Path(f"{d}/out/report.md").read_text() if os.path.exists(f"{d}/out/report.md") else ""
        check(proc.returncode == 0, "exit 0" + ("" if proc.returncode == 0 else f": {report[-1500:]}"))
        if os.path.exists(f"{d}/out/profile.json"):
            result = json.loads(pathlib.Path(f"{d}/out/profile.json").read_text())
            profiles = result["profiles"]
            check(list(profiles) == ["segtrain", "segtrain_all", "compiled", "eager"], f"four programs: {list(profiles)}")
            check(all("not profiled on the CPU" in profiles[n].get("why", "") for n in ("segtrain", "segtrain_all")),
                  "why segtrain is not, said (with the all kernels too)")
            for name in ("eager", "compiled"):
                p = profiles[name]
                check(p.get("steps") == 3 and p.get("kind") == "cpu", f"{name}: 3 steps of CPU ops")
                total = sum(p["ms"].values()) + p["idle_ms"]
                check(p["ms"]["GEMM"] > 0 and p["ms"]["optimizer"] > 0 and p["ms"]["attention"] > 0,
                      f"{name}: GEMM, attention and optimizer time found")
                check(abs(total - p["window_ms"]) < 0.02 * p["window_ms"],
                      f"{name}: classes + idle = {total:.3f} ms, the window {p['window_ms']} ms")
                kinds = p["elementwise_ms"]
                check(abs(sum(kinds.values()) - p["ms"]["elementwise"]) < 1e-3 * max(p["ms"]["elementwise"], 1)
                      and sum(v > 0 for v in kinds.values()) >= 2,
                      f"{name}: the elementwise kinds sum to the class ({p['ms']['elementwise']} ms): {kinds}")
            md = pathlib.Path(f"{d}/out/profile.md").read_text()
            check("| class | segtrain | segtrain_all | compiled | eager |" in md and "| **idle** |" in md, "profile.md's table")
        else:
            check(False, "profile.json written")

        # 4. the CUPTI tracer
        dirs = gp.cupti_dirs()
        if dirs:
            lib, why = gp.build_cupti_tracer(d)
            check(lib is not None, f"cupti_kernel_trace.cpp builds against {dirs}: {why}")
            if lib:
                nm = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True).stdout
                check("InitializeInjection" in nm, "the tracer exports InitializeInjection")
                built = os.stat(lib).st_mtime_ns
                again, _ = gp.build_cupti_tracer(d)
                check(again == lib and os.stat(lib).st_mtime_ns == built, "a second program of the run reuses it")
        else:
            print("(no CUPTI on this machine: the tracer's build is not checked here)")

        # 5. --until: a program that would not finish by then is not started, each said; its estimate is the
        # longest program so far (a fake clock: segtrain "takes" 60 s, so compiled's 45 s floor is not what counts)
        env = dict(os.environ, BUILD_DIR=args.build_dir, BENCH_DEVICE="cpu")
        proc = subprocess.run([args.python, str(ROOT / "bench/gpu_profile.py"), "run", "--out", f"{d}/short",
                               "--until", str(int(time.time()) + 20)], env=env, capture_output=True, text=True, cwd=ROOT)
        check(proc.returncode == 0, f"--until in 20 s: exit 0 {proc.stderr[-500:]}")
        profiles = json.loads(pathlib.Path(f"{d}/short/profile.json").read_text())["profiles"]
        check(list(profiles) == ["segtrain", "segtrain_all", "compiled", "eager"]
              and all("not profiled: " in p.get("why", "") and "--until" in p["why"] for p in profiles.values()),
              f"--until in 20 s: no program started, each said: {[p.get('why', '')[:60] for p in profiles.values()]}")
        proc = subprocess.run([args.python, str(ROOT / "bench/gpu_profile.py"), "run", "--out", f"{d}/short",
                               "--until", "1"], env=env, capture_output=True, text=True, cwd=ROOT)
        check(proc.returncode != 0 and "--until 1" in proc.stderr, f"--until in the past refused: {proc.stderr[-200:]}")
        check_until_with_a_fake_clock(gp, d, args.build_dir)

        # 6. SIGTERM while a program runs: its child goes too, the finished programs stay in profile.json
        parent = subprocess.Popen([args.python, str(ROOT / "bench/gpu_profile.py"), "run", "--out", f"{d}/term"],
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        child = None
        try:
            deadline = time.time() + 120
            while child is None and time.time() < deadline and parent.poll() is None:
                child = next((pid for pid in children_of(parent.pid) if b"loop" in cmdline_of(pid)), None)
                time.sleep(0.05)
            check(child is not None, "a profiled program's child process found")
            if child is not None:
                time.sleep(0.5)  # the parent back in its wait for the child (not between fork and wait)
                parent.send_signal(signal.SIGTERM)
                _, err = parent.communicate(timeout=60)
                check(parent.returncode == 143, f"SIGTERM: exit {parent.returncode} (expected 143) {err[-300:]}")
                check(not os.path.exists(f"/proc/{child}"), f"the program's child {child} ended with the profile")
                kept = json.loads(pathlib.Path(f"{d}/term/profile.json").read_text())["profiles"]
                check(list(kept) == ["segtrain", "segtrain_all"], f"profile.json keeps the finished programs: {list(kept)}")
        finally:
            if parent.poll() is None:
                parent.kill()
                parent.wait()
            if child is not None and os.path.exists(f"/proc/{child}"):
                os.kill(child, signal.SIGKILL)
    finish()


def check_until_with_a_fake_clock(gp, d, build_dir):
    """gpu_profile.run with a clock that the programs advance (segtrain 60 s, segtrain_all 20, the others 10)."""
    clock = {"now": 1000.0}
    took = {"segtrain": 60, "segtrain_all": 20, "compiled": 10, "eager": 10}

    def fake_segtrain(work, store, shape, steps, variant=None):
        clock["now"] += took["segtrain" + (f"_{variant}" if variant else "")]
        return None, "ran (fake)"

    def fake_reference(work, store, shape, program):
        clock["now"] += took[program]
        return {"why": "ran (fake)"}

    saved = (gp.time, gp.segtrain_profile, gp.reference_profile, gp.tb.SEGTRAIN)
    gp.time = type("FakeTime", (), {"time": staticmethod(lambda: clock["now"])})
    gp.segtrain_profile, gp.reference_profile = fake_segtrain, fake_reference
    gp.tb.SEGTRAIN = pathlib.Path(build_dir).resolve() / "trainer" / "segtrain"  # what run() checks is built
    try:
        # 130 s: segtrain (35 expected, 60 taken), segtrain_all (60 expected from then: 1060 + 65 <= 1130), then
        # compiled would need 60 + 5 from 1080: not started (with its own 45 s floor alone it would have fit).
        profiles = gp.run(f"{d}/fake", until=1130)
    finally:
        gp.time, gp.segtrain_profile, gp.reference_profile, gp.tb.SEGTRAIN = saved
    ran = [name for name, p in profiles.items() if p.get("why") == "ran (fake)"]
    check(ran == ["segtrain", "segtrain_all"], f"--until with a fake clock: ran {ran}")
    check(all("it takes about 60 s" in profiles[n]["why"] for n in ("compiled", "eager")),
          f"the later programs expected to take the longest so far (60 s): "
          f"{[profiles[n]['why'] for n in ('compiled', 'eager')]}")


def children_of(pid):
    found = []
    for task in pathlib.Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


def cmdline_of(pid):
    try:
        return pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


if __name__ == "__main__":
    main()
