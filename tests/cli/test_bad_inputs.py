"""A corpus of bad inputs, one table: each is refused with exactly one line on stderr, exit
code 2 (1 for what fails at run time), within 20 s, and leaves nothing in the user's folder."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import autotune

BIG = "9" * 400
"""A 400-digit integer: Python parses it, and any product of it would take planning forever."""
SECONDS = 20
RESULTS = "STUDY_RESULTS"
"""Stands for the results folder of a study run once (simulated) for the cases that need one."""
EST = ["estimate", "--cluster", "local:2"]
SPACE = ["space", "--cluster", "local:2", "--space", "s.yaml"]
MODEL = ["space", "--cluster", "local:2", "--model", "m.yaml"]
CLUSTER = ["space", "--cluster", "c.yaml"]
SIMULATE = ["run", "--launcher", "simulate", "--cluster", "local:2", "--trials", "1"]
GOOD_MODEL = (
    "num_layers: 2\nhidden_size: 64\nnum_attention_heads: 4\nvocab_size: 128\n"
    "seq_length: 32\nglobal_batch_size: 8\n"
)


@dataclass(frozen=True)
class Case:
    id: str
    args: list[str]
    files: dict[str, str | bytes] = field(default_factory=dict)
    code: int = 2
    says: str = ""
    """What the line must hold: the suggestion, where there is one."""


def _model(**changes: object) -> str:
    lines = dict(line.split(": ", 1) for line in GOOD_MODEL.splitlines())
    lines.update({k: str(v) for k, v in changes.items()})
    return "".join(f"{k}: {v}\n" for k, v in lines.items() if v != "DROP")


def _cluster(extra: str = "", **changes: object) -> str:
    base = {
        "devices_per_node": "2",
        "device": "cpu",
        "backend": "gloo",
        "intra_link": "{bandwidth_gbps: 5, latency_us: 20}",
    }
    base.update({k: str(v) for k, v in changes.items()})
    return "".join(f"{k}: {v}\n" for k, v in base.items() if v != "DROP") + extra


def _knob_cases() -> list[Case]:
    bad = {"0": "0", "neg": "-1", "nan": "nan", "inf": "inf", "big": BIG, "word": "lots"}
    cases = []
    for knob in ("tp", "pp", "mbs", "dp", "zero", "reduce_bucket", "allgather_bucket"):
        for name, value in bad.items():
            if knob == "zero" and name == "0":
                value = "4"  # ZeRO stage 0 is a real setting; 4 is not
            cases.append(Case(f"config-{knob}-{name}", [*EST, "--config", f"{knob}={value}"]))
    yaml_bad = {"0": "0", "neg": "-2", "nan": ".nan", "inf": ".inf", "big": BIG, "word": "lots"}
    for knob in ("tp", "pp", "mbs", "zero", "reduce_bucket", "allgather_bucket"):
        for name, value in yaml_bad.items():
            if knob == "zero" and name == "0":
                value = "7"
            text = f"engine: deepspeed\nknobs:\n  {knob}: [{value}]\n"
            cases.append(Case(f"spacefile-{knob}-{name}", SPACE, {"s.yaml": text}))
    return cases


def _nccl_cases() -> list[Case]:
    cases = []
    for knob, value in [
        ("nccl_algo", "Turbo"),
        ("nccl_algo", "ring;rm -rf"),
        ("nccl_algo", "0"),
        ("nccl_proto", "Fast"),
        ("nccl_proto", "simple\u00e9"),
        ("nccl_proto", "-1"),
    ]:
        tag = f"{knob}-{value.encode().hex()[:8]}"
        # On an NCCL cluster: on gloo, rule nccl_knobs_need_nccl would refuse any value.
        nccl = ["--cluster", "dgx-h100:1"]
        cases.append(Case(f"config-{tag}", ["estimate", *nccl, "--config", f"{knob}={value}"]))
        text = f"engine: deepspeed\nknobs:\n  {knob}: ['{value}']\n"
        cases.append(
            Case(f"spacefile-{tag}", ["space", *nccl, "--space", "s.yaml"], {"s.yaml": text})
        )
    cases.append(
        Case("plan-config-nccl", ["plan", "--cluster", "local:2", "--config", "nccl_algo=X"])
    )
    return cases


def _space_file_cases() -> list[Case]:
    files: dict[str, str | bytes] = {
        "knobs-list": "engine: deepspeed\nknobs: [zero, mbs]\n",
        "knobs-string": "engine: deepspeed\nknobs: zero\n",
        "knobs-empty": "engine: deepspeed\nknobs: {}\n",
        "knob-mapping": "engine: deepspeed\nknobs:\n  zero: {a: 1}\n",
        "knob-nested-list": "engine: deepspeed\nknobs:\n  zero: [[1, 2]]\n",
        "knob-null": "engine: deepspeed\nknobs:\n  zero: [null]\n",
        "bool-as-int": "engine: deepspeed\nknobs:\n  overlap_comm: [2]\n",
        "unknown-knob": "engine: deepspeed\nknobs:\n  turbo: [1]\n",
        "dp-knob": "engine: deepspeed\nknobs:\n  dp: [2]\n",
        "empty-list": "engine: deepspeed\nknobs:\n  zero: []\n",
        "wrong-engine": "engine: megatron\nknobs:\n  zero: [1]\n",
        "engine-list": "engine: [deepspeed]\nknobs:\n  zero: [1]\n",
        "unknown-top": "engine: deepspeed\nknobz: {}\n",
        "nested-brackets": "knobs: " + "[" * 10_000,
        "nested-closed": "knobs: " + "[" * 10_000 + "]" * 10_000 + "\n",
        "nested-maps": "knobs: " + "{a: " * 5_000 + "1" + "}" * 5_000 + "\n",
        "top-list": "- zero\n- mbs\n",
        "top-scalar": "42\n",
        "top-null": "",
        "binary": bytes(range(256)) * 4,
        "nul-bytes": b"engine: deepspeed\x00\nknobs: {zero: [1]}\n",
        "recompute-bad": "engine: deepspeed\nknobs:\n  recompute: [sometimes]\n",
        "many-values": "engine: deepspeed\nknobs:\n  reduce_bucket: ["
        + ", ".join(str(i) for i in range(1, 200_001))
        + "]\n",
        "anchors-bomb": "a: &a [x, x, x, x, x, x, x, x, x]\n"
        "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
        "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
        "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
        "knobs: {zero: *f}\n",
        "duplicate-knob": "engine: deepspeed\nknobs:\n  zero: [1]\n  zero: [2]\n",
        "yours-list": "engine: deepspeed\nknobs:\n  zero: [1]\nyours:\n  zero: [1, 2]\n",
        "yours-unknown": "engine: deepspeed\nknobs:\n  zero: [1]\nyours:\n  warp: 9\n",
        "yours-scalar": "engine: deepspeed\nknobs:\n  zero: [1]\nyours: 3\n",
        "yours-bad-value": "engine: deepspeed\nknobs:\n  zero: [1]\nyours:\n  mbs: -2\n",
    }
    cases = [Case(f"spacefile-{k}", SPACE, {"s.yaml": v}) for k, v in files.items()]
    cases += [
        Case("space-missing", ["space", "--space", "nope.yaml"]),
        Case("space-dir", ["space", "--space", "."]),
        Case("space-dev-zero", ["space", "--space", "/dev/zero"]),
        Case("space-proc", ["space", "--space", "/proc/self/mem"]),
        Case("space-empty-name", ["space", "--space", ""]),
    ]
    return cases


def _model_cases() -> list[Case]:
    files = {
        "missing-hidden": _model(hidden_size="DROP"),
        "batch-0": _model(global_batch_size=0),
        "batch-neg": _model(global_batch_size=-8),
        "batch-huge": _model(global_batch_size=10**20),
        "batch-big": _model(global_batch_size=BIG),
        "layers-huge": _model(num_layers=10**20),
        "hidden-huge": _model(hidden_size=2**62),
        "seq-huge": _model(seq_length=10**18),
        "vocab-nan": _model(vocab_size=".nan"),
        "heads-inf": _model(num_attention_heads=".inf"),
        "name-newline": _model(name='"gpt\\nevil"'),
        "name-nul": _model(name='"gpt\\0x"'),
        "experts-huge": _model(num_moe_experts=10**16),
        "nested": "num_layers: " + "[" * 10_000,
        "binary": bytes(range(256)) * 4,
        "top-list": "[1, 2]\n",
        "layers-true": _model(num_layers="true"),
        "layers-float": _model(num_layers="2.5"),
        "duplicate-key": _model() + "num_layers: 3\n",
    }
    cases = [Case(f"model-{k}", MODEL, {"m.yaml": v}) for k, v in files.items()]
    cases += [
        Case("model-unknown", ["space", "--model", "gpt-9000"]),
        Case("model-empty", ["space", "--model", ""]),
        Case("model-dir", ["space", "--model", "."]),
        Case("model-dev-null", ["space", "--model", "/dev/null"]),
        Case("model-plan-unknown", ["plan", "--model", "nope", "--cluster", "local:2"]),
    ]
    return cases


def _cluster_cases() -> list[Case]:
    slurm = "slurm:\n  {key}: {value}\n"
    files = {
        "missing-devices": _cluster(devices_per_node="DROP"),
        "cpu-nccl": _cluster(backend="nccl"),
        "devices-true": _cluster(devices_per_node="true"),
        "duplicate-key": _cluster() + "backend: gloo\n",
        "missing-link": _cluster(intra_link="DROP"),
        "nodes-0": _cluster(nodes=0),
        "nodes-neg": _cluster(nodes=-3),
        "nodes-huge": _cluster(nodes=10**20),
        "nodes-1e6": _cluster(nodes=10**6),
        "devices-0": _cluster(devices_per_node=0),
        "devices-huge": _cluster(devices_per_node=10**20),
        "devices-4096": _cluster(devices_per_node=4096),
        "bandwidth-0": _cluster(intra_link="{bandwidth_gbps: 0, latency_us: 1}"),
        "bandwidth-nan": _cluster(intra_link="{bandwidth_gbps: .nan, latency_us: 1}"),
        "bandwidth-inf": _cluster(intra_link="{bandwidth_gbps: .inf, latency_us: 1}"),
        "latency-nan": _cluster(intra_link="{bandwidth_gbps: 5, latency_us: .nan}"),
        "latency-inf": _cluster(intra_link="{bandwidth_gbps: 5, latency_us: .inf}"),
        "memory-nan": _cluster(
            device="{name: x, memory_gib: .nan, peak_tflops: {bf16: 100}}", backend="nccl"
        ),
        "tflops-inf": _cluster(
            device="{name: x, memory_gib: 80, peak_tflops: {bf16: .inf}}", backend="nccl"
        ),
        "partition-newline": _cluster(slurm.format(key="partition", value='"gpu\\n#SBATCH -x"')),
        "partition-nul": _cluster(slurm.format(key="partition", value='"gpu\\0"')),
        "account-newline": _cluster(slurm.format(key="account", value='"a\\nb"')),
        "account-cr": _cluster(slurm.format(key="account", value='"a\\rb"')),
        "qos-tab": _cluster(slurm.format(key="qos", value='"a\\tb"')),
        "sbatch-newline": _cluster('slurm:\n  extra_sbatch: ["--x\\n--y"]\n'),
        "name-newline": _cluster(name='"c\\nd"'),
        "name-nul": _cluster(name='"c\\0d"'),
        "nested": "nodes: " + "{a: " * 10_000,
        "binary": bytes(range(256)) * 4,
        "top-scalar": "hello\n",
    }
    cases = [Case(f"cluster-{k}", CLUSTER, {"c.yaml": v}) for k, v in files.items()]
    for name, section, says in (
        ("section-typo", "slrum: {partition: gpu}", "did you mean slurm?"),
        ("section-unknown", "kubernetes: {namespace: ml}", "the launchers' sections: slurm"),
        ("section-setting-typo", "slurm: {partitio: gpu}", "no such setting"),
        ("section-not-a-list", "slurm: {extra_sbatch: --exclusive}", "extra_sbatch"),
        ("section-number", "slurm: {qos: 5}", "qos"),
        ("replay-setting-typo", "replay: {tabel: sweep.csv}", "settings: table"),
    ):
        file = {"c.yaml": _cluster(section + "\n")}
        cases.append(Case(f"cluster-{name}", CLUSTER, file, says=says))
    for command in (["commbench"], ["nodes"], [*SIMULATE[:3]]):
        cases.append(
            Case(
                f"cluster-section-typo-{command[0]}",
                [*command, "--cluster", "c.yaml"],
                {"c.yaml": _cluster("slrum: {partition: gpu}\n")},
                says="did you mean slurm?",
            )
        )
    cases.append(
        Case(
            "run-replay-section-table-missing",
            ["run", "--launcher", "replay", "--cluster", "c.yaml"],
            {"c.yaml": _cluster("replay: {table: missing.csv}\n")},
            says="missing.csv",
        )
    )
    for value in (
        "local:99999999999999999999",
        "local:0",
        "local:-1",
        "local:x",
        "local:",
        "dgx-h100:0",
        "dgx-h100:" + BIG,
        "dgx-h100:100000000",
        "dgx-h900:2",
        "local:\u0662",
        "",
    ):
        cases.append(
            Case(
                f"cluster-arg-{value.encode().hex()[:24] or 'empty'}",
                ["space", "--cluster", value],
            )
        )
    cases.append(Case("cluster-estimate-huge", ["estimate", "--cluster", "dgx-h100:99999999999"]))
    cases.append(Case("cluster-plan-zero", ["plan", "--cluster", "local:0"]))
    return cases


def _path_cases() -> list[Case]:
    file = {"afile": "x\n"}
    return [
        Case("run-results-file", [*SIMULATE, "--results", "afile"], file),
        Case("run-results-under-file", [*SIMULATE, "--results", "afile/sub"], file),
        Case("run-results-proc", [*SIMULATE, "--results", "/proc/autotune-results"]),
        Case("run-results-sys", [*SIMULATE, "--results", "/sys/autotune"]),
        Case("run-trial-nodes-0", [*SIMULATE, "--trial-nodes", "0"]),
        Case("run-trial-nodes-over", [*SIMULATE, "--trial-nodes", "2"]),
        Case("run-trial-nodes-word", [*SIMULATE, "--trial-nodes", "some"]),
        Case("run-confirm-full-neg", [*SIMULATE, "--trial-nodes", "1", "--confirm-full", "-1"]),
        Case(
            "run-trial-nodes-not-dividing",
            ["run", "--launcher", "simulate", "--cluster", "dgx-h100:4", "--trial-nodes", "3"],
        ),
        Case("run-users-config-no-command", [*SIMULATE, "--users-config", "mbs=2"]),
        Case(
            "run-replay-table-huge",
            ["run", "--launcher", "replay", "--table", "t.csv", "--cluster", "local:2"],
            {"t.csv": b"zero,mbs,step_time_s,status\n" + b"1,1,0.1,ok\n" * 2_000_000},
        ),
        Case("run-seed-negative", [*SIMULATE, "--seed", "-5"]),
        Case("plan-cluster-no-count", ["plan", "--cluster", "dgx-h100"], says="dgx-h100:16"),
        Case(
            "plan-model-missing-file",
            ["plan", "--cluster", "local:2", "--model", "m.yaml"],
            says="does not exist",
        ),
        Case(
            "plan-model-typo",
            ["plan", "--cluster", "local:2", "--model", "llama3-8"],
            says="did you mean llama3-8b?",
        ),
        Case(
            "plan-engine-fsdp",
            ["plan", "--cluster", "local:2", "--engine", "fsdp"],
            says="fsdp runs on --engine torch",
        ),
        Case(
            "run-launcher-typo",
            [*SIMULATE[:1], "--launcher", "slrum", "--cluster", "local:2"],
            says="did you mean slurm?",
        ),
        Case("run-sampler-typo", [*SIMULATE, "--sampler", "tpee"], says="did you mean tpe?"),
        Case("estimate-knob-typo", [*EST, "--config", "mbz=2"], says="did you mean mbs?"),
        Case("run-seed-huge", [*SIMULATE, "--seed", str(2**32)]),
        Case("run-early-stop-margin-nan", [*SIMULATE, "--early-stop-margin", "nan"]),
        Case("run-production-word", [*SIMULATE, "--production", "long"], says="like 90s"),
        Case("run-production-zero", [*SIMULATE, "--production", "0d"], says="positive"),
        Case("run-production-half-step", [*SIMULATE, "--production", "2.5 steps"]),
        Case("run-precision-inf", [*SIMULATE, "--precision", "inf"]),
        Case("run-storage-in-memory", [*SIMULATE, "--storage", "sqlite://"]),
        Case("run-storage-memory-file", [*SIMULATE, "--storage", "sqlite:///:memory:"]),
        Case("estimate-config-twice", [*EST, "--config", "zero=1,zero=3"]),
        Case(
            "run-users-config-unknown",
            [
                *SIMULATE,
                "--engine",
                "torch",
                "--space",
                "s.yaml",
                "--users-config",
                "warp=9",
                "--",
                "t.py",
            ],
            {"s.yaml": "engine: torch\nknobs:\n  mbs: [1, 2]\n", "t.py": "print(1)\n"},
        ),  # fmt: skip
        Case(
            "run-users-config-read-from-ds-config",
            [*SIMULATE, "--users-config", "mbs=2", "--", "t.py", "--deepspeed_config", "d.json"],
            {"d.json": '{"train_batch_size": 16}', "t.py": "import deepspeed\n"},
        ),
        Case("run-study-slash", [*SIMULATE, "--study", "a/b"]),
        Case("run-study-newline", [*SIMULATE, "--study", "a\nb"]),
        Case(
            "run-space-nan",
            [*SIMULATE, "--space", "s.yaml"],
            {"s.yaml": "engine: deepspeed\nknobs:\n  mbs: [.nan]\n"},
        ),
        Case("run-partition-newline", [*SIMULATE, "--partition", "gpu\n#SBATCH --x"]),
        Case("run-account-nul", [*SIMULATE, "--account", "a\x01b"]),
        Case("commbench-partition-newline", ["commbench", "--partition", "gpu\n#SBATCH --x"]),
        Case(
            "run-table-of-replay-missing",
            [*SIMULATE[:1], "--launcher", "replay", "--table", "no.csv"],
        ),
        Case("trial-out-file", ["trial", "--cluster", "local:2", "--out", "afile"], file),
        Case("trial-out-proc", ["trial", "--cluster", "local:2", "--out", "/proc/at-trial"]),
        Case("trial-out-under-file", ["trial", "--cluster", "local:2", "--out", "afile/t"], file),
        Case("trial-config-nan", ["trial", "--cluster", "local:2", "--config", "mbs=nan"]),
        Case("trial-config-algo", ["trial", "--cluster", "local:2", "--config", "nccl_algo=x"]),
        Case("trials-results-file", ["trials", "--study", "s", "--results", "afile"], file),
        Case("trials-results-proc", ["trials", "--study", "s", "--results", "/proc"]),
        Case("trials-unknown", ["trials", "--study", "nosuch"]),
        Case("trials-bad-name", ["trials", "--study", "../x"]),
        Case("trials-bad-storage", ["trials", "--study", "s", "--storage", "nonsense"]),
        Case("export-results-file", ["export", "--study", "s", "--results", "afile"], file),
        Case("export-unknown", ["export", "--study", "nosuch", "--out", "o"]),
        Case("export-out-proc", ["export", "--study", "s", "--out", "/proc/x"]),
        Case("report-results-proc", ["report", "--study", "s", "--results", "/proc/y"]),
        Case("report-unknown", ["report", "--study", "nosuch", "--out", "r.html"]),
        Case("report-bad-name", ["report", "--study", "a b"]),
        Case("calibrate-nothing", ["calibrate"]),
        Case("calibrate-both", ["calibrate", "--study", "s", "--commbench", "afile"], file),
        Case("calibrate-missing", ["calibrate", "--commbench", "nope.json"]),
        Case("calibrate-dir", ["calibrate", "--commbench", "."]),
        Case("calibrate-not-json", ["calibrate", "--commbench", "afile"], file),
        Case("commbench-simulated", ["commbench", "--launcher", "simulate"], says="local, slurm"),
        Case("commbench-replayed", ["commbench", "--launcher", "replay"], says="local, slurm"),
        Case("commbench-launcher-typo", ["commbench", "--launcher", "slrum"], says="slurm"),
        *(
            Case(
                f"commbench-{flag[2:]}-{value}", ["commbench", "--cluster", "local:2", flag, value]
            )
            for flag, value in (
                ("--sizes", "4M:1K"),
                ("--sizes", "big"),
                ("--ops", "all_reduce,nope"),
                ("--groups", "inter"),
                ("--groups", "diagonal"),
                ("--groups", "intra:3"),
                ("--groups", "inter:2"),
            )
        ),
        Case("calibrate-results-proc", ["calibrate", "--study", "s", "--results", "/proc/z"]),
        Case("estimate-results-file", [*EST, "--results", "afile"], file),
        *(
            Case(
                f"estimate-calibration-{name}",
                [*EST, "--results", "r"],
                {"r/calibration/local_2.json": f'{{"calibration": {{"overlap": {value}}}}}'},
            )
            for name, value in [("word", '"fast"'), ("neg", "-1"), ("nan", "NaN"), ("big", "7")]
        ),
        Case(
            "estimate-calibration-zero",
            [*EST, "--results", "r"],
            {"r/calibration/local_2.json": '{"calibration": {"compute_efficiency": 0}}'},
        ),
        Case("estimate-config-garbage", [*EST, "--config", "tp"]),
        Case("estimate-config-empty-value", [*EST, "--config", "tp="]),
        Case("estimate-config-unknown", [*EST, "--config", "warp=9"]),
        Case("plan-config-zero", ["plan", "--cluster", "local:2", "--config", "mbs=0"]),
        Case("space-engine", ["space", "--engine", "jax"]),
    ]


def _study_cases() -> list[Case]:
    """--out and --results of the commands that read a study, given one that exists."""
    study = ["--study", "s", "--results", RESULTS]
    file = {"afile": "x\n"}
    kept = {"o/keep.txt": "mine\n"}
    return [
        Case("export-study-out-proc", ["export", *study, "--out", "/proc/x"]),
        Case("export-study-out-file", ["export", *study, "--out", "afile"], file),
        Case("export-study-out-under-file", ["export", *study, "--out", "afile/b"], file),
        Case("export-study-out-not-empty", ["export", *study, "--out", "o"], kept),
        Case("export-study-storage-bad", ["export", *study, "--storage", "sqlite:///afile"], file),
        Case("report-study-out-proc", ["report", *study, "--out", "/proc/x/r.html"]),
        Case("report-study-out-under-file", ["report", *study, "--out", "afile/r.html"], file),
        Case("report-study-out-dir", ["report", *study, "--out", "o"], kept),
        Case("report-study-out-users-file", ["report", *study, "--out", "t.py"], {"t.py": "1\n"}),
        Case("report-study-out-dotfile", ["report", *study, "--out", ".rc"], {".rc": "X=1\n"}),
        Case("report-study-out-storage", ["report", *study, "--out", f"{RESULTS}/s/study.db"]),
        Case(
            "report-study-out-storage-forced",
            ["report", *study, "--out", f"{RESULTS}/s/study.db", "--force"],
        ),
        Case("trials-study-format", ["trials", *study, "--format", "xml"]),
        Case("run-study-other-model", [*SIMULATE, *study, "--model", "gpt-1.3b"]),
    ]


CASES = _study_cases() + _knob_cases() + _nccl_cases() + _space_file_cases() + _model_cases()
CASES += _cluster_cases() + _path_cases()
XFAIL: dict[str, str] = {}


@pytest.fixture(scope="module")
def study_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results folder holding study `s`: one simulated trial of tiny on local:2."""
    results = tmp_path_factory.mktemp("study") / "results"
    done = autotune(*SIMULATE, "--study", "s", "--results", str(results), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return results


def _files(folder: Path) -> dict[Path, bytes | None]:
    """Every path under `folder`, each file with its content: nothing of the user's may be
    replaced either."""
    return {p: p.read_bytes() if p.is_file() else None for p in folder.rglob("*")}


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            c,
            id=c.id,
            marks=[pytest.mark.xfail(strict=True, reason=XFAIL[c.id])] if c.id in XFAIL else [],
        )
        for c in CASES
    ],
)
def test_bad_input_is_one_line(tmp_path: Path, case: Case, request: pytest.FixtureRequest) -> None:
    args = case.args
    if any(RESULTS in a for a in args):
        results = str(request.getfixturevalue("study_results"))
        args = [a.replace(RESULTS, results) for a in args]
    for name, content in case.files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    before = _files(tmp_path)
    result = autotune(*args, cwd=tmp_path, timeout=SECONDS)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == case.code, result.stderr[-3000:]
    assert len(lines) == 1 and lines[0].strip(), result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert case.says in lines[0]
    after = _files(tmp_path)
    changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    assert not changed, sorted(map(str, changed))


def test_names_are_taken_in_any_case(tmp_path: Path) -> None:
    """`--engine DeepSpeed`, `--launcher Simulate`, `--sampler TPE`: the names, not a typo."""
    ran = autotune(
        *SIMULATE, "--engine", "DeepSpeed", "--sampler", "TPE", "--results", str(tmp_path),
        cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-2000:]
    planned = autotune("plan", "--engine", "Torch", "--cluster", "local:2", cwd=tmp_path)
    assert planned.returncode == 0 and "plan torch on tiny" in planned.stdout


def test_the_corpus_is_large_and_its_ids_unique() -> None:
    assert len(CASES) >= 120
    assert len({c.id for c in CASES}) == len(CASES)


def test_root_may_ignore_read_only_folders_so_proc_stands_in() -> None:
    """A read-only folder stops no one running as root; /proc and /sys refuse everyone, so
    the corpus uses them for an unwritable --results or --out."""
    assert os.access("/proc", os.R_OK)


def test_a_dashboard_port_in_use_is_one_line(study_results: Path, tmp_path: Path) -> None:
    """Once a 42-line traceback, after the study was loaded."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = ["dashboard", "--study", "s", "--results", str(study_results), "--port", str(port)]
        result = autotune(*args, cwd=tmp_path, timeout=SECONDS)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stderr[-3000:]
    assert len(lines) == 1 and f"--port {port}" in lines[0], result.stderr[-3000:]
