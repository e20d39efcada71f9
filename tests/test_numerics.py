"""Numerics modes (methods/numerics.py): what portable mode sets, how a job gets it, and that it
pins the kernels a host would choose (the same bits whatever the host's dispatch), while native
mode follows the host."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from methods import numerics
from methods.errors import HarnessError

# torch work through the kernels a host chooses: MKL GEMM (linear, GRU), ATen's vectorised
# elementwise and reduction kernels (exp, tanh, softmax, sums), convolutions (oneDNN or ATen) and
# their backward, a few Adam steps that let last-bit differences grow as training does
PROBE = textwrap.dedent("""
    import hashlib, torch
    from methods import numerics
    numerics.apply_torch_settings(torch)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(16, 16, 3, stride=2), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
    gru = torch.nn.GRU(20, 16, batch_first=True, bidirectional=True)
    params = list(net.parameters()) + list(gru.parameters())
    opt = torch.optim.Adam(params, lr=1e-2)
    images, words = torch.randn(24, 3, 20, 20), torch.randn(24, 9, 20)
    for _ in range(5):
        img = torch.nn.functional.normalize(net(images), dim=1)
        txt = torch.nn.functional.normalize(gru(words)[0].mean(1)[:, :16] + gru(words)[0].mean(1)[:, 16:], dim=1)
        scores = img @ txt.T
        loss = torch.logsumexp(scores / 0.1, 1).mean() - scores.diag().mean() / 0.1
        opt.zero_grad(); loss.backward(); opt.step()
    digest = hashlib.sha256()
    for p in params:
        digest.update(p.detach().numpy().tobytes())
    digest.update(scores.detach().numpy().tobytes())
    print(torch.backends.cpu.get_cpu_capability(), digest.hexdigest(), torch.backends.mkldnn.enabled)
""")

# what another x86-64 host's libraries would choose by themselves: ATen's kernels of a CPU without
# AVX2, oneDNN's SSE4.1 convolutions, and more threads than this job was given
OTHER_HOST = {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41", "OMP_NUM_THREADS": "2"}
HOST_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_CBWR", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                  "NPY_DISABLE_CPU_FEATURES", "OPENBLAS_CORETYPE", numerics.ENV_MODE, numerics.ENV_THREADS)


def probe(extra_env: dict) -> str:
    env = {k: v for k, v in os.environ.items() if k not in HOST_VARIABLES}
    env.update(extra_env)
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_portable_mode_pins_what_the_host_would_choose():
    """The same computation under this host's dispatch and under another host's: native mode's
    bits change, portable mode's do not (and ATen runs its AVX2 kernels in both)."""
    portable = numerics.portable_environment(1)
    native_here, native_other = probe({"OMP_NUM_THREADS": "1"}), probe(OTHER_HOST)
    portable_here, portable_other = probe(portable), probe({**OTHER_HOST, **portable})
    assert native_here != native_other, "the simulated host change did not change native results: the test proves nothing"
    assert native_other.startswith("DEFAULT ") and native_here.endswith(" True")
    # oneDNN off: its convolutions pick their blocking from the host's cache sizes, which no
    # variable pins (an Intel and an AMD host gave other bits with it on)
    assert portable_here == portable_other and portable_here.startswith("AVX2 ") and portable_here.endswith(" False")


def test_portable_mode_refuses_an_environment_it_did_not_set():
    """A process whose portable variables were changed after the fact (here: MKL's branch) stops
    with one line instead of computing other bits."""
    env = {**numerics.portable_environment(1), "MKL_CBWR": "AUTO"}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**os.environ, **env}, capture_output=True, text=True)
    assert out.returncode != 0 and "MKL_CBWR not set as portable mode needs" in out.stderr


def test_the_shell_prefix_is_one_env_command_with_every_variable():
    prefix = numerics.shell_prefix("portable", 3)
    assert prefix.startswith("env ") and prefix.endswith(" ")
    run = subprocess.run(prefix + f"{sys.executable} -c 'import os, json; print(json.dumps(dict(os.environ)))'",
                         shell=True, capture_output=True, text=True, check=True)
    seen = json.loads(run.stdout)
    assert {k: seen[k] for k in numerics.portable_environment(3)} == numerics.portable_environment(3)
    assert seen["OMP_NUM_THREADS"] == seen["MKL_NUM_THREADS"] == seen[numerics.ENV_THREADS] == "3"
    assert numerics.shell_prefix("native", 3) == ""
    with pytest.raises(HarnessError, match="numerics 'fast' is not one of native, portable"):
        numerics.shell_prefix("fast", 1)


def test_a_job_started_without_the_portable_environment_starts_again_with_it():
    calls = []
    environ = {"PATH": "/bin", "ATEN_CPU_CAPABILITY": "default"}
    numerics.ensure_environment("portable", 2, environ=environ, execve=lambda *a: calls.append(a))
    ((executable, argv, env),) = calls
    assert executable == sys.executable and argv == list(sys.orig_argv)
    assert {k: env[k] for k in numerics.portable_environment(2)} == numerics.portable_environment(2)
    assert env["PATH"] == "/bin" and env["ITR_NUMERICS_REEXEC"] == "1"
    # in its environment already, or native: nothing happens; a restart that did not take: one line
    numerics.ensure_environment("portable", 2, environ=numerics.portable_environment(2), execve=calls.append)
    numerics.ensure_environment("native", 2, environ=environ, execve=calls.append)
    assert len(calls) == 1
    with pytest.raises(HarnessError, match="the environment did not take effect"):
        numerics.ensure_environment("portable", 2, environ={"ITR_NUMERICS_REEXEC": "1"}, execve=calls.append)


def test_numpy_runs_without_its_avx512_loops_in_portable_mode():
    env = {**os.environ, **numerics.portable_environment(1)}
    out = subprocess.run([sys.executable, "-c", "import numpy; numpy.show_runtime()"], env=env, capture_output=True,
                         text=True, check=True).stdout
    found = out.split("'found':")[1].split("]")[0]
    assert "X86_V2" in out and "X86_V4" not in found and "AVX512" not in found


def test_portable_settings_ask_for_deterministic_algorithms_as_torchs_own_call_does():
    """The setter portable mode calls leaves torch in the state ``torch.use_deterministic_algorithms(True)``
    leaves it (errors, not warnings, for a non-deterministic kernel), without importing inductor; a
    process that loaded inductor gets the public call."""
    script = textwrap.dedent("""
        import json, sys, torch
        from methods import numerics
        state = lambda: [torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()]
        fresh = state()
        numerics.deterministic_algorithms(torch)
        ours = state() + ["torch._inductor" in sys.modules]
        torch._C._set_deterministic_algorithms(False)
        import torch._inductor.config as inductor_config   # a process that loaded inductor
        numerics.deterministic_algorithms(torch)
        ours_loaded = state() + [inductor_config.deterministic]
        torch._C._set_deterministic_algorithms(False); inductor_config.deterministic = False
        torch.use_deterministic_algorithms(True)            # the public call, as the oracle
        print(json.dumps({"fresh": fresh, "ours": ours, "ours_loaded": ours_loaded,
                          "public": state() + [inductor_config.deterministic]}))
    """)
    out = json.loads(subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                                    check=True).stdout)
    assert out["fresh"] == [False, False] and out["public"] == [True, False, True]
    assert out["ours"] == out["public"][:2] + [False]   # the same state, inductor not imported
    assert out["ours_loaded"] == out["public"]
