"""stability.readers: TensorBoard event files and MLflow runs back into ``{key: [(step, value)]}``."""

from __future__ import annotations

import json
import math
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from stability.readers import LogReadError, LogReadWarning, read_mlflow_run, read_tensorboard
from stability.readers._tensorboard import masked_crc32c
from stability.signals import History
from tests.helpers import REPO, subprocess_env


def f32(x: float) -> float:
    return float(np.float32(x))


def write_scalars(logdir: Path, series: dict[str, list[tuple[int, float]]], **kwargs) -> Path:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(logdir))
    for tag, points in series.items():
        for step, value in points:
            writer.add_scalar(tag, value, step, **kwargs)
    writer.close()
    (path,) = logdir.glob("events.out.tfevents.*")
    return path


def record(payload: bytes) -> bytes:
    header = struct.pack("<Q", len(payload))
    return header + struct.pack("<I", masked_crc32c(header)) + payload + struct.pack("<I", masked_crc32c(payload))


def record_offsets(data: bytes) -> list[int]:
    offsets, pos = [], 0
    while pos < len(data):
        offsets.append(pos)
        pos += 16 + struct.unpack_from("<Q", data, pos)[0]
    return offsets


SERIES = {"train/value_loss": [(0, 1.5), (10, 0.25), (20, -3.0)], "train/approx_kl": [(0, 0.01), (10, 0.02)]}


def test_roundtrip_simple_value(tmp_path: Path) -> None:
    write_scalars(tmp_path, SERIES)
    got = read_tensorboard(tmp_path)
    assert got == {tag: [(s, f32(v)) for s, v in pts] for tag, pts in SERIES.items()}
    history = History.from_scalars(got)
    assert history.steps == [0, 10, 20] and history.values("value_loss") == [1.5, 0.25, -3.0]


def test_roundtrip_tensor_form_and_single_file(tmp_path: Path) -> None:
    path = write_scalars(tmp_path, SERIES, new_style=True)  # TF2-style: float tensor + "scalars" plugin
    assert read_tensorboard(path) == {tag: [(s, f32(v)) for s, v in pts] for tag, pts in SERIES.items()}


def test_tensor_variants_and_non_scalars(tmp_path: Path) -> None:
    from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2

    def event(step: int, value: summary_pb2.Summary.Value) -> bytes:
        return event_pb2.Event(
            step=step, wall_time=1.0 + step, summary=summary_pb2.Summary(value=[value])
        ).SerializeToString()

    scalars = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))
    histograms = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="histograms")
    )
    double = tensor_pb2.TensorProto(dtype=2, tensor_content=struct.pack("<d", 0.1))
    later = tensor_pb2.TensorProto(dtype=2, double_val=[0.2])
    matrix = tensor_pb2.TensorProto(
        dtype=1,
        float_val=[1.0] * 6,
        tensor_shape=tensor_shape_pb2.TensorShapeProto(
            dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=2), tensor_shape_pb2.TensorShapeProto.Dim(size=3)]
        ),
    )
    data = record(event_pb2.Event(wall_time=0.0, file_version="brain.Event:2").SerializeToString())
    data += record(event(1, summary_pb2.Summary.Value(tag="x", tensor=double, metadata=scalars)))
    data += record(event(2, summary_pb2.Summary.Value(tag="x", tensor=later)))  # metadata only sent once
    data += record(event(1, summary_pb2.Summary.Value(tag="h", tensor=matrix, metadata=histograms)))
    data += record(
        event(
            2,
            summary_pb2.Summary.Value(
                tag="one", tensor=tensor_pb2.TensorProto(dtype=1, float_val=[7.0]), metadata=histograms
            ),
        )
    )
    (tmp_path / "events.out.tfevents.1.tf2").write_bytes(data)
    assert read_tensorboard(tmp_path) == {"x": [(1, 0.1), (2, 0.2)]}


def test_directory_merges_files_recursively_sorted_by_step(tmp_path: Path) -> None:
    write_scalars(tmp_path / "a", {"loss": [(0, 1.0), (20, 3.0)]})
    time.sleep(0.01)
    write_scalars(tmp_path / "b" / "nested", {"loss": [(10, 2.0)], "other": [(5, 9.0)]})
    assert read_tensorboard(tmp_path) == {"loss": [(0, 1.0), (10, 2.0), (20, 3.0)], "other": [(5, 9.0)]}


def test_non_finite_values_are_kept(tmp_path: Path) -> None:
    write_scalars(tmp_path, {"loss": [(0, float("nan")), (1, float("inf"))]})
    (nan, inf) = read_tensorboard(tmp_path)["loss"]
    assert np.isnan(nan[1]) and inf == (1, float("inf"))


def test_missing_path_and_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(LogReadError, match="no such file or directory"):
        read_tensorboard(tmp_path / "nope")
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    (tmp_path / "empty" / "notes.txt").write_text("hello")
    with pytest.raises(LogReadError, match=r"no TensorBoard event files"):
        read_tensorboard(tmp_path / "empty")


def test_empty_file(tmp_path: Path) -> None:
    empty = tmp_path / "events.out.tfevents.0.empty"
    empty.write_bytes(b"")
    with pytest.raises(LogReadError, match=r"empty \(0 bytes"):
        read_tensorboard(empty)
    write_scalars(tmp_path / "good", SERIES)
    with pytest.warns(LogReadWarning, match="empty"):
        assert read_tensorboard(tmp_path)["train/approx_kl"] == [(0, f32(0.01)), (10, f32(0.02))]


def test_truncated_last_record_returns_prefix(tmp_path: Path) -> None:
    path = write_scalars(tmp_path, {"loss": [(0, 1.0), (1, 2.0), (2, 3.0)]})
    data = path.read_bytes()
    path.write_bytes(data[:-5])
    with pytest.warns(LogReadWarning, match=r"truncated record at byte \d+ \(.*was the writer killed"):
        assert read_tensorboard(path) == {"loss": [(0, 1.0), (1, 2.0)]}
    with pytest.raises(LogReadError, match="truncated record"):
        read_tensorboard(path, strict=True)
    path.write_bytes(data[: record_offsets(data)[1] + 7])  # the file-version record and a few bytes
    with pytest.raises(LogReadError, match=r"none holds a scalar.*truncated record at byte"):
        read_tensorboard(path)
    path.write_bytes(data[:20])
    with pytest.raises(LogReadError, match="nothing could be read: truncated record at byte 0"):
        read_tensorboard(path)


def test_corrupted_checksums(tmp_path: Path) -> None:
    path = write_scalars(tmp_path, {"loss": [(0, 1.0), (1, 2.0), (2, 3.0)]})
    data = bytearray(path.read_bytes())
    offsets = record_offsets(bytes(data))
    data[offsets[2] + 14] ^= 0xFF  # payload of the step-1 record
    path.write_bytes(bytes(data))
    with pytest.warns(LogReadWarning, match=rf"corrupt record at byte {offsets[2]} \(data checksum"):
        assert read_tensorboard(path) == {"loss": [(0, 1.0), (2, 3.0)]}
    data[offsets[2] + 14] ^= 0xFF
    data[offsets[2] + 9] ^= 0xFF  # its length checksum: the rest of the file cannot be framed
    path.write_bytes(bytes(data))
    with pytest.warns(LogReadWarning, match=rf"corrupt record header at byte {offsets[2]}"):
        assert read_tensorboard(path) == {"loss": [(0, 1.0)]}


def test_foreign_files(tmp_path: Path) -> None:
    noise = tmp_path / "events.out.tfevents.1.noise"
    noise.write_bytes(np.random.default_rng(0).bytes(4096))
    text = tmp_path / "events.out.tfevents.2.text"
    text.write_text("step,loss\n0,1.0\n1,0.5\n")
    for path in (noise, text):
        with pytest.raises(LogReadError, match=rf"{path.name}: nothing could be read: not a TensorBoard event file"):
            read_tensorboard(path)
    with pytest.raises(LogReadError, match=r"\(2 event files\): nothing could be read"):
        read_tensorboard(tmp_path)


def test_event_files_without_scalars(tmp_path: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path))
    writer.add_text("notes", "hello", 0)
    writer.add_histogram("weights", np.arange(10.0), 0)
    writer.close()
    with pytest.raises(
        LogReadError,
        match=r"none holds a scalar summary \(found only non-scalar summaries, "
        r"with tags notes/text_summary, weights\)",
    ):
        read_tensorboard(tmp_path)


def test_import_is_cheap() -> None:
    code = (
        "import sys, stability.readers; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'mlflow', 'tensorboard', 'google', 'torch', "
        "'sweeps', 'optuna', 'ray'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=subprocess_env(), check=True)
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------------------------- MLflow


def test_read_mlflow_run(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment("readers"), tags={"algo": "ppo"})
    run_id = run.info.run_id
    for step, value in [(2, 0.5), (0, 2.0), (1, 1.0)]:
        client.log_metric(run_id, "train/value_loss", value, step=step)
    for step, value in [(0, 0.01), (1, float("nan"))]:
        client.log_metric(run_id, "train/approx_kl", value, step=step)
    client.set_terminated(run_id)

    scalars, tags = read_mlflow_run(run_id, uri)
    assert scalars["train/value_loss"] == [(0, 2.0), (1, 1.0), (2, 0.5)]
    assert scalars["train/approx_kl"][0] == (0, 0.01) and np.isnan(scalars["train/approx_kl"][1][1])
    assert set(scalars) == {"train/value_loss", "train/approx_kl"}
    assert tags["algo"] == "ppo" and "mlflow.runName" in tags

    with pytest.raises(
        LogReadError,
        match=rf"no MLflow run with id '0123456789abcdef0123456789abcdef' in the "
        rf"tracking store '{uri}'",
    ):
        read_mlflow_run("0123456789abcdef0123456789abcdef", uri)
    with pytest.raises(LogReadError, match=r"cannot read MLflow run '\.\./x'.*INVALID_PARAMETER_VALUE"):
        read_mlflow_run("../x", uri)


def test_read_mlflow_run_missing_or_unreachable_store(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    with pytest.raises(LogReadError, match=rf"'abc'.*sqlite:///{missing}.*does not exist"):
        read_mlflow_run("abc", f"sqlite:///{missing}")
    assert not missing.exists()  # reading never creates a store
    with pytest.raises(LogReadError, match="local folder that does not exist"):
        read_mlflow_run("abc", str(tmp_path / "mlruns"))
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(LogReadError, match=rf"'abc'.*'http://\*\*\*@127.0.0.1:{port}' is not reachable"):
        read_mlflow_run("abc", f"http://user:secret@127.0.0.1:{port}")
    assert time.monotonic() - started < 10


# --------------------------------------------------------------------------------------------- repro script


def test_cleanrl_repro_script_logs_cleanrl_tags(tmp_path: Path) -> None:
    script = REPO / "conf" / "repro" / "cleanrl_ppo.py"
    proc = subprocess.run(
        [
            sys.executable,
            str(script),
            "--total-timesteps",
            "2048",
            "--num-envs",
            "2",
            "--num-steps",
            "256",
            "--update-epochs",
            "2",
            "--dropout-in-forward",
            "--head-std",
            "1.0",
            "--weight-decay",
            "0.1",
            "--unassigned-to-device",
            "--logdir",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    scalars = read_tensorboard(tmp_path / "run")
    tags = {
        "losses/policy_loss",
        "losses/value_loss",
        "losses/approx_kl",
        "losses/clipfrac",
        "losses/explained_variance",
        "losses/entropy",
        "losses/grad_norm",
        "charts/episodic_return",
        "charts/learning_rate",
    }
    assert tags <= set(scalars)
    assert [step for step, _ in scalars["losses/value_loss"]] == [512, 1024, 1536, 2048]
    assert len(scalars["charts/episodic_return"]) == 2 * (1024 // 200)  # 2 envs, 200-step episodes
    history = History.from_scalars(scalars)
    assert all(len(history.values(n)) == 4 for n in ("value_loss", "clip_fraction", "grad_norm", "entropy"))
    # CleanRL's own record of its arguments, in the log: diagnose reads it as the run's config
    from stability.diagnose import diagnose, load_history
    from stability.readers import context_from_cleanrl_table, read_tensorboard_log

    _, texts = read_tensorboard_log(tmp_path / "run")
    ctx = context_from_cleanrl_table(texts["hyperparameters"])
    assert ctx == {
        "gamma": 0.99,
        "gae_lambda": 0.95,  # the stuck-critic rule reads the lambda-returns' size with it
        "ent_coef": 0.0,
        "vf_coef": 0.5,
        "max_grad_norm": 0.5,
        "n_steps": 256,
        "normalize_advantage": True,
        "weight_decay": 0.1,
        "time_limit": 200,  # the registered time limit of the env id it names (Pendulum-v1)
    }  # no learning rate: annealed, a schedule whose values the log holds
    assert load_history(tmp_path / "run").context["weight_decay"] == 0.1
    assert load_history(tmp_path / "run", context={"weight_decay": 0.0}).context["weight_decay"] == 0.0
    notes = diagnose(tmp_path / "run").notes
    assert any("hyperparameters table" in n and "weight_decay 0.1" in n for n in notes)


def test_a_text_that_is_no_cleanrl_table_gives_no_config() -> None:
    from stability.readers import context_from_cleanrl_table

    assert context_from_cleanrl_table("hello\nworld") == {}
    assert context_from_cleanrl_table("|param|value|\n|-|-|\n|gamma|high|") == {}  # not SB3's types
    table = "|param|value|\n|-|-|\n|gamma|0.9|\n|anneal_lr|False|\n|learning_rate|0.001|\n|env_id|Pendulum-v1|"
    assert context_from_cleanrl_table(table) == {"gamma": 0.9, "learning_rate": 0.001, "time_limit": 200}


# --------------------------------------------------------------------------------------------- configs

ZOO_CONFIG = """\
!!python/object/apply:collections.OrderedDict
- - - batch_size
    - 64
  - - gamma
    - 0.999
  - - learning_rate
    - lin_0.001
  - - n_envs
    - 8
  - - n_steps
    - 32
  - - normalize
    - '{''norm_obs'': True, ''norm_reward'': False}'
  - - policy
    - MlpPolicy
  - - policy_kwargs
    - dict(log_std_init=-2, ortho_init=False, activation_fn=nn.ReLU, net_arch=dict(pi=[64], vf=[64]),
      optimizer_class=th.optim.AdamW, optimizer_kwargs=dict(weight_decay=1e-3))
"""


def test_rl_zoo3_config_yml_is_read_without_evaluating_it(tmp_path: Path) -> None:
    from stability.readers import read_config

    path = tmp_path / "config.yml"
    path.write_text(ZOO_CONFIG)
    assert read_config(path) == {
        "gamma": 0.999,
        "n_steps": 32,
        "norm_obs": True,
        "norm_reward": False,
        "log_std_init": -2.0,
        "optimizer": "AdamW",
        "weight_decay": 1e-3,
    }
    # with the algorithm named, its defaults stand for what rl-zoo3 left out; a learning-rate
    # schedule is no number, and the default rate does not stand for it
    ppo = read_config(path, "ppo")
    assert ppo["algo"] == "PPO" and ppo["max_grad_norm"] == 0.5 and ppo["vf_coef"] == 0.5
    assert ppo["gamma"] == 0.999 and "learning_rate" not in ppo
    assert read_config(path, "a2c")["algo"] == "A2C"


def test_zoo_hyperparameter_file_entry_and_plain_mappings(tmp_path: Path) -> None:
    from stability.readers import context_from_hyperparams, read_config

    entry = tmp_path / "a2c.yml"
    entry.write_text("CartPole-v1:\n  n_steps: 8\n  gamma: 0.9999\n  normalize: true\n  ent_coef: 0.0\n")
    assert read_config(entry, "a2c") == read_config(entry, "A2C")
    got = read_config(entry, "a2c")
    assert (got["n_steps"], got["gamma"], got["norm_reward"], got["max_grad_norm"]) == (8, 0.9999, True, 0.5)
    assert got["optimizer"] == "RMSprop" and got["weight_decay"] == 0.0
    assert got["default_optimizer"] == "rmsprop"  # A2C's own, as the callback records it
    # numbers as people write them: YAML 1.1 would read 1e-8 and 3e-4 as strings, and refuse them
    plain = tmp_path / "plain.yaml"
    plain.write_text("algo: PPO\nmax_grad_norm: 1e-8\nlearning_rate: 3e-4\nvf_coef: 5E-1\n")
    read = read_config(plain)
    assert (read["max_grad_norm"], read["learning_rate"], read["vf_coef"]) == (1e-8, 3e-4, 0.5)
    # rlsweep's spellings: normalize {obs, reward}, the weight_decay and log_std_init knobs, an algo key
    ctx = context_from_hyperparams(
        {"algo": "PPO", "normalize": {"obs": True, "reward": False}, "weight_decay": 0.01, "log_std_init": -1}
    )
    assert (ctx["norm_obs"], ctx["norm_reward"], ctx["weight_decay"], ctx["log_std_init"]) == (True, False, 0.01, -1.0)
    assert ctx["default_learning_rate"] == 3e-4  # PPO's constructor default, what the callback records too
    assert context_from_hyperparams({"normalize": {"obs": True}})["norm_reward"] is False
    assert context_from_hyperparams({"normalize": False}) == {"norm_obs": False, "norm_reward": False}
    assert context_from_hyperparams({"max_grad_norm": "off"})["max_grad_norm"] == math.inf  # no clipping
    assert context_from_hyperparams({"clip_range_vf": 3e-5})["clip_range_vf"] == 3e-5  # PPO's value clip
    assert context_from_hyperparams({"reward_scale": 270})["reward_scale"] == 270.0  # rlsweep's knob
    assert "clip_range_vf" not in context_from_hyperparams({"clip_range_vf": "lin_0.1"})  # a schedule: no number
    # an optimizer class named without its weight decay has torch's default: AdamW's is 0.01
    adamw = context_from_hyperparams({"algo": "ppo", "policy_kwargs": "dict(optimizer_class=th.optim.AdamW)"})
    assert (adamw["optimizer"], adamw["weight_decay"]) == ("AdamW", 0.01)
    # SGD's momentum, from optimizer_kwargs beside rlsweep's optimizer knob (it sizes SGD's step)
    sgd = context_from_hyperparams({"optimizer": "sgd", "policy_kwargs": {"optimizer_kwargs": {"momentum": 0.9}}})
    assert (sgd["optimizer"], sgd["momentum"]) == ("sgd", 0.9)
    assert "momentum" not in context_from_hyperparams({"optimizer": "sgd"})
    # rlsweep's log_std_bounds knob: a Gaussian clamped inside them, which the advice must not propose again
    assert context_from_hyperparams({"log_std_bounds": [-5, 2]})["log_std_bounds"] == [-5.0, 2.0]


def test_sb3_model_file_gives_its_own_values_and_action_space(tmp_path: Path) -> None:
    from stable_baselines3 import A2C, PPO

    from stability.readers import read_config

    PPO(
        "MlpPolicy",
        "CartPole-v1",
        n_steps=64,
        batch_size=64,
        gamma=0.999,
        gae_lambda=0.9,
        max_grad_norm=2.0,
        device="cpu",
    ).save(tmp_path / "ppo.zip")
    ctx = read_config(tmp_path / "ppo.zip")
    assert ctx["algo"] == "PPO" and ctx["gamma"] == 0.999 and ctx["max_grad_norm"] == 2.0 and ctx["n_steps"] == 64
    assert ctx["gae_lambda"] == 0.9
    assert ctx["action_space"] == "Discrete" and ctx["continuous"] is False
    assert ctx["entropy_max"] == pytest.approx(math.log(2))
    A2C("MlpPolicy", "Pendulum-v1", learning_rate=lambda f: 7e-4 * f, device="cpu").save(tmp_path / "a2c.zip")
    ctx = read_config(tmp_path / "a2c.zip")
    assert ctx["algo"] == "A2C" and ctx["continuous"] is True and "learning_rate" not in ctx  # a pickled schedule


@pytest.mark.parametrize(
    "text, where",
    [
        ("- gamma\n- 0.99\n", "expected a mapping"),
        ("gamma: [0.99\n", "neither an SB3 model"),
        ("gamma: high\n", "gamma is 'high'"),
        ("n_steps: 8\nnormalize: maybe\n", "normalize is 'maybe'"),
        ("n_steps: 8\npolicy_kwargs: dict(net_arch=[64\n", "policy_kwargs is"),
        ("CartPole-v1: {n_steps: 8}\nPendulum-v1: {n_steps: 8}\n", "2 env entries (CartPole-v1, Pendulum-v1)"),
        ("algo: reinforce\ngamma: 0.99\n", "unknown algorithm 'reinforce'"),
        ("n_steps: 8\nreward_scale: big\n", "reward_scale is 'big'; it must be a finite number"),
        ("n_steps: 8\nreward_scale: 0\n", "reward_scale is 0.0; it must be a positive number"),
        ("n_steps: 8\nlog_std_bounds: [2, -5]\n", "log_std_bounds is [2, -5]; it must be [low, high]"),
        ("n_steps: 8\nlog_std_bounds: wide\n", "log_std_bounds is 'wide'; it must be [low, high]"),
    ],
)
def test_bad_configs_are_refused_naming_file_and_key(tmp_path: Path, text: str, where: str) -> None:
    from stability.readers import read_config

    path = tmp_path / "config.yml"
    path.write_text(text)
    with pytest.raises(LogReadError) as err:
        read_config(path)
    assert str(path) in str(err.value) and where in str(err.value)


def test_a_zip_that_is_no_model_and_a_missing_file(tmp_path: Path) -> None:
    import zipfile

    from stability.readers import read_config

    with zipfile.ZipFile(tmp_path / "other.zip", "w") as archive:
        archive.writestr("readme.txt", "hello")
    with pytest.raises(LogReadError, match="not an SB3 model"):
        read_config(tmp_path / "other.zip")
    with pytest.raises(LogReadError, match="no such file"):
        read_config(tmp_path / "missing.yml")
    with pytest.raises(LogReadError, match="unknown algorithm 'ppo2'"):
        read_config(tmp_path / "other.zip", "ppo2")


def _nan_log(logdir: Path) -> None:
    """A plain SB3 PPO log whose losses turn NaN at update 20."""
    steps = [256 * i for i in range(1, 30)]
    broken = lambda value: [(s, value if i < 19 else math.nan) for i, s in enumerate(steps)]  # noqa: E731
    write_scalars(
        logdir,
        {
            "train/value_loss": broken(1.0),
            "train/policy_gradient_loss": broken(-0.01),
            "train/entropy_loss": broken(-0.69),
            "train/approx_kl": broken(0.01),
            "train/explained_variance": [(s, 0.5) for s in steps],
            "rollout/ep_rew_mean": [(s, 20.0 + i) for i, s in enumerate(steps)],
        },
    )


def test_diagnose_with_the_runs_config_advises_nothing_it_already_had(tmp_path: Path) -> None:
    """`rlsweep diagnose --hyperparams`: the advice reads the run's own values. Without the config,
    SB3's own max_grad_norm (0.5) is advised, saying the run's value was not seen."""
    from tests.helpers import rlsweep

    _nan_log(tmp_path / "tb")
    plain = rlsweep(tmp_path, "diagnose", "tb", "--json")
    assert plain.returncode == 0, plain.stderr
    report = json.loads(plain.stdout)
    patches = [p for f in report["findings"] for p in f["patches"]]
    assert report["verdict"] == "nan_scale" and "hyperparams_read" not in report
    assert any(p["patch"] == {"max_grad_norm": 0.5} and "not recorded" in p["why"] for p in patches)
    (tmp_path / "config.yml").write_text(ZOO_CONFIG)
    with_config = rlsweep(tmp_path, "diagnose", "tb", "--json", "--hyperparams", "config.yml", "--algo", "ppo")
    assert with_config.returncode == 0, with_config.stderr
    report = json.loads(with_config.stdout)
    assert report["verdict"] == "nan_scale"
    assert report["hyperparams_read"]["gamma"] == 0.999 and report["hyperparams_read"]["max_grad_norm"] == 0.5
    patches = [p["patch"] for f in report["findings"] for p in f["patches"]]
    assert {"max_grad_norm": 0.5} not in patches and patches  # what is left is still advice
    (tmp_path / "unclipped.yml").write_text("algo: a2c\nmax_grad_norm: 'off'\n")  # rlsweep's spelling
    unclipped = rlsweep(tmp_path, "diagnose", "tb", "--json", "--hyperparams", "unclipped.yml")
    assert unclipped.returncode == 0, unclipped.stderr
    assert json.loads(unclipped.stdout)["hyperparams_read"]["max_grad_norm"] == "inf"  # strict JSON
    text = rlsweep(tmp_path, "diagnose", "tb", "--hyperparams", "config.yml")
    assert text.returncode == 0 and "config (config.yml): gamma 0.999" in " ".join(text.stdout.split())
    # the env's registered reward_threshold as the reference return; a given one stands over it
    given = ["--env", "CartPole-v1", "--reference-return", "200"]
    for args, expected in ((["--env", "CartPole-v1"], 475.0), (given, 200.0)):
        env = rlsweep(tmp_path, "diagnose", "tb", "--json", "--algo", "ppo", *args)
        assert env.returncode == 0, env.stderr
        assert json.loads(env.stdout)["hyperparams_read"]["reference_return"] == expected
        assert json.loads(env.stdout)["hyperparams_read"]["time_limit"] == 500
    registered_without = rlsweep(tmp_path, "diagnose", "tb", "--json", "--env", "Pendulum-v1")
    assert registered_without.returncode == 0  # its time limit is still read (a bound on what a return reaches)
    assert json.loads(registered_without.stdout)["hyperparams_read"] == {"time_limit": 200}
    assert "Pendulum-v1 is registered without a reward_threshold" in registered_without.stderr


def test_diagnose_refuses_a_bad_config_with_exit_2(tmp_path: Path) -> None:
    from tests.helpers import rlsweep

    _nan_log(tmp_path / "tb")
    (tmp_path / "config.yml").write_text("gamma: high\n")
    before = sorted(p.name for p in tmp_path.iterdir())
    for args, named in (
        (["--hyperparams", "config.yml"], "config.yml: gamma is 'high'"),
        (["--hyperparams", "missing.yml"], "missing.yml: no such file"),
        (["--algo", "reinforce"], "--algo: unknown algorithm 'reinforce'"),
        (["--env", "Nope-v0"], "--env Nope-v0: not a registered Gymnasium id"),
        (["--env", "Nope-v0", "--reference-return", "5"], "--env Nope-v0: not a registered Gymnasium id"),
        (["--reference-return", "nan"], "--reference-return nan: give a finite episode return"),
    ):
        result = rlsweep(tmp_path, "diagnose", "tb", *args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr and named in " ".join(result.stderr.split())
    assert sorted(p.name for p in tmp_path.iterdir()) == before
