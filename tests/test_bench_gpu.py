"""cxsim bench gpu: its --small rehearsal runs on the CPU and reports what the GPU run reports."""

from __future__ import annotations

import json

import pytest
import torch

from cxsim.experiments.bench_gpu import Config, bpe_tokenizer, env_corpus, main, run


@pytest.mark.slow
def test_small_mode_on_cpu_reports_rates_ratio_and_no_peak_memory(capsys, tmp_path):
    out = tmp_path / "figures" / "bench_gpu.json"
    main(["--small", "--device", "cpu", "--tiny-iterations", "1", "--out", str(out)])
    printed = capsys.readouterr().out
    results = json.loads(out.read_text())
    assert results["config"]["small"] and results["config"]["device"] == "cpu"
    qwen = results["qwen2"]
    assert results["device"] == "cpu"
    assert qwen["rollout_tokens_per_s"] > 0 and qwen["trained_tokens_per_s"] > 0
    assert qwen["sft_tokens_per_s"] > 0
    assert len(qwen["iterations"]) == 2  # the --small default
    assert all(it["rollout_tokens"] > 0 for it in qwen["iterations"])
    # sampling and scoring agree: before any actor step the ratio is 1 within the tolerance
    assert 0.0 <= qwen["first_log_ratio_max"] <= Config().ratio_tolerance
    assert qwen["first_ratio_within_tolerance"]
    assert qwen["peak_memory"] == "n/a" and qwen["peak_memory_gib"] is None
    assert "peak memory n/a" in printed and "first-step ratio" in printed and "within" in printed
    assert results["tiny"]["device_s"] > 0 and results["tiny"]["cpu_s"] > 0
    assert results["tiny"]["ratio"] == pytest.approx(
        results["tiny"]["device_s"] / results["tiny"]["cpu_s"]
    )
    assert "x the CPU time" in printed


def test_tokenizer_is_a_byte_level_bpe_with_chatml_trained_on_env_text():
    tok = bpe_tokenizer(400, env_corpus(episodes=2))
    assert len(tok) == 400
    text = tok.apply_chat_template(
        [{"role": "user", "content": "key k1 value"}], tokenize=False, add_generation_prompt=True
    )
    assert text.endswith("<|im_start|>assistant\n")
    ids = tok("answer k1", add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == "answer k1"
    assert len(ids) < len("answer k1")  # merges learnt from the env text, not bytes alone


def test_a_failing_part_is_reported_the_other_still_runs_and_figures_are_written(
    monkeypatch, tmp_path, capsys
):
    from cxsim.experiments import bench_gpu

    def broken(cfg, device):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")

    monkeypatch.setattr(bench_gpu, "qwen_part", broken)
    monkeypatch.setattr(bench_gpu, "tiny_seconds", lambda cfg, device: 2.0)
    out = tmp_path / "bench_gpu.json"
    with pytest.raises(RuntimeError, match="these parts failed: qwen2"):
        run(Config(small=True, device="cpu", out=str(out)))
    figures = json.loads(out.read_text())
    assert figures["failed"] == ["qwen2"] and "qwen2" not in figures
    assert figures["tiny"] == {"device_s": 2.0, "cpu_s": 2.0, "ratio": 1.0}
    printed = capsys.readouterr().out
    assert "part qwen2 FAILED" in printed and "simulated" in printed


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"device": "gpu"}, "device must be auto, cpu, cuda or cuda:N"),
        ({"vocab_size": 100}, "--vocab-size 100"),
        ({"rollouts": 0}, "--rollouts must be >= 1"),
        ({"ratio_tolerance": 0.0}, "--ratio-tolerance must be positive"),
    ],
)
def test_bad_settings_fail_before_any_work(kwargs, says):
    with pytest.raises(ValueError, match=says.replace("+", r"\+")):
        Config(**kwargs)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_small_mode_on_cuda_runs_a_ppo_step_with_peak_memory():
    results = run(Config(small=True, device="cuda", tiny_iterations=1))
    qwen = results["qwen2"]
    assert results["device"].startswith("cuda")
    assert qwen["peak_memory_gib"] > 0
    assert qwen["rollout_tokens_per_s"] > 0 and qwen["trained_tokens_per_s"] > 0
    assert qwen["first_log_ratio_max"] <= Config().ratio_tolerance
    assert results["tiny"]["ratio"] > 0
