"""Config validation: every mistake is reported with the key that caused it."""

import copy
import math
import re

import pytest
import yaml

from fedrepro.cli import main
from fedrepro.config import deep_merge, load_global, parse_overrides, resolve_experiment, validate_global
from fedrepro.errors import ConfigError


def test_repository_config_is_valid():
    cfg = load_global()
    assert cfg["scale"] in ("default", "quick", "paper")


def test_run_scale_per_mode():
    from fedrepro.config import run_scale

    cheap, costly, no_quick = ({"quick": {"m": 10}, "default_scale": "paper"}, {"quick": {"m": 10}}, {"quick": {}})
    assert [run_scale(cheap, m) for m in ("default", "quick", "paper")] == ["paper", "quick", "paper"]
    assert [run_scale(costly, m) for m in ("default", "quick", "paper")] == ["quick", "quick", "paper"]
    # without quick overrides, quick would repeat the paper's settings: it runs (and is judged) at paper scale
    assert [run_scale(no_quick, m) for m in ("default", "quick", "paper")] == ["paper", "paper", "paper"]
    with pytest.raises(ConfigError, match="scale: 'huge'"):
        run_scale(cheap, "huge")


def test_default_scales_override_an_experiments_default_scale():
    """`default_scales` (PAPER.NAME -> quick | paper) moves one experiment under scale: default, nothing else, and
    the other modes still decide for every experiment; a key naming no paper, no experiment or no scale is refused."""
    from fedrepro.config import experiment_scale

    cfg = load_global(overrides={"default_scales": {"fedhdp.noniid_mnist": "paper", "fedhdp.fig1": "quick"}})
    assert experiment_scale(cfg, "fedhdp", "noniid_mnist") == "paper"
    assert experiment_scale(cfg, "fedhdp", "skewed_mnist") == "quick"
    assert experiment_scale(cfg, "fedhdp", "fig1") == "quick"
    assert experiment_scale(load_global(), "fedhdp", "fig1") == "paper"
    assert experiment_scale(cfg, "fedhdp", "noniid_mnist", "quick") == "quick"
    assert resolve_experiment(cfg, "fedhdp.noniid_mnist").params["rounds"] == 500
    for bad, words in (
        ({"nope.x": "paper"}, "default_scales: no paper 'nope'"),
        ({"fedhdp.x": "big"}, "default_scales.fedhdp.x"),
        ({"fedhdp.nope": "paper"}, "no experiment 'nope'"),
    ):
        with pytest.raises(ConfigError, match=re.escape(words)):
            experiment_scale(load_global(overrides={"default_scales": bad}), "fedhdp", "fig1")


@pytest.mark.parametrize(
    "mutate, key",
    [
        (lambda c: c.update(scale="huge"), "scale"),
        (lambda c: c.update(sedes=[1]), "sedes"),
        (lambda c: c["seeds"].update(quick="0"), "seeds.quick"),
        (lambda c: c["seeds"].update(paper=[-1]), "seeds.paper[0]"),
        (lambda c: c["data"].pop("dir"), "data.dir"),
        (lambda c: c["data"].update(mirorr="/x"), "data.mirorr"),
    ],
)
def test_global_schema_error_names_the_key(mutate, key):
    c = copy.deepcopy(load_global())
    mutate(c)
    with pytest.raises(ConfigError) as err:
        validate_global(c)
    assert f": {key}:" in str(err.value)


def _paper_cfg(tmp_path, mutate):
    cfg = load_global()
    doc = yaml.safe_load(open(cfg["papers"]["adaped"]))
    mutate(doc)
    p = tmp_path / "adaped.yaml"
    p.write_text(yaml.safe_dump(doc))
    return deep_merge(cfg, {"papers": {"adaped": str(p)}})


@pytest.mark.parametrize(
    "mutate, key",
    [
        (lambda d: d["experiments"]["fig1a"]["params"].update(m="many"), "experiments.fig1a.params.m"),
        (lambda d: d["experiments"]["fig1a"]["params"].update(nn=3), "experiments.fig1a.params.nn"),
        (lambda d: d["experiments"]["fig1a"]["params"].pop("delta"), "experiments.fig1a.params.delta"),
        (lambda d: d["experiments"]["fig1a"].update(knd="x"), "experiments.fig1a.knd"),
    ],
)
def test_experiment_param_error_names_the_key(tmp_path, mutate, key):
    cfg = _paper_cfg(tmp_path, mutate)
    with pytest.raises(ConfigError) as err:
        resolve_experiment(cfg, "adaped.fig1a", "paper")
    assert key in str(err.value)


def test_unknown_kind_is_named(tmp_path):
    cfg = _paper_cfg(tmp_path, lambda d: d["experiments"]["fig1a"].update(kind="nope"))
    with pytest.raises(ConfigError, match="experiments.fig1a.kind: unknown experiment kind 'nope'"):
        resolve_experiment(cfg, "adaped.fig1a", "paper")


def test_overrides_parse_yaml_values_and_dotted_keys():
    assert parse_overrides(["n=7", "eps0=[0.1, 0.5]", "a.b=x", "f=1e-5"]) == {
        "n": 7,
        "eps0": [0.1, 0.5],
        "a": {"b": "x"},
        "f": 1e-5,
    }
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_overrides(["n"])
    # YAML 1.1 reads 1e6 as a string: an integral one is the integer a count needs (range(1e6) would fail)
    assert parse_overrides(["reps=1e6", "f=2.5e0"]) == {"reps": 1000000, "f": 2.5}
    assert isinstance(parse_overrides(["reps=1e6"])["reps"], int)


@pytest.mark.parametrize(
    "override, key",
    [
        ("delta=.nan", "params.delta"),
        ("eps0=[0.5, .nan]", "params.eps0[1]"),
        ("sigma_x=.inf", "params.sigma_x"),
        ("mu=-.inf", "params.mu"),  # a plain {"type": "number"}, no bounds
        ("r=1e400", "params.r"),  # overflows to inf
    ],
)
def test_a_non_finite_parameter_is_refused_before_any_work(tmp_path, capsys, override, key):
    out = tmp_path / "run"
    assert main(["run", "adaped.fig1a", "--out", str(out), "--set", override]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"experiments.fig1a.{key}:" in err and "not a finite number" in err, err
    assert not out.exists()


def test_a_schema_may_allow_inf_explicitly():
    """PPSGD's alpha = inf (global learning only) is a value of the grid, allowed by its schema; NaN and -inf not."""
    cfg = load_global()
    exp = resolve_experiment(cfg, "ppsgd.fig1a_synthetic", "quick", {"alphas": [0, math.inf]})
    assert exp.params["alphas"] == [0, math.inf]
    for bad in (math.nan, -math.inf):
        with pytest.raises(ConfigError, match=r"params.alphas\[1\]: .* is not a finite number"):
            resolve_experiment(cfg, "ppsgd.fig1a_synthetic", "quick", {"alphas": [0, bad]})


def test_set_override_is_validated_and_changes_effective_scale():
    cfg = load_global()
    exp = resolve_experiment(cfg, "adaped.table3", "quick", {"m": 7})  # table3 has no quick block: paper + --set
    assert exp.params["m"] == 7 and exp.scale == "paper" and exp.effective_scale == "custom"
    exp = resolve_experiment(cfg, "adaped.linreg_d50", "quick", {"d": 7})
    assert exp.params["d"] == 7 and exp.effective_scale == "quick"
    assert resolve_experiment(cfg, "adaped.fig1a", "quick").effective_scale == "paper"
    with pytest.raises(ConfigError, match=r"experiments.fig1a.params.n"):
        resolve_experiment(cfg, "adaped.fig1a", "quick", {"n": 0})


def test_cli_reports_config_errors_without_traceback(tmp_path, capsys):
    rc = main(["run", "adaped.fig1a", "--out", str(tmp_path), "--set", "m=oops"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "experiments.fig1a.params.m" in err and "Traceback" not in err
    assert main(["run", "adaped.nosuch", "--out", str(tmp_path)]) == 2
    assert "experiments.nosuch: no such experiment" in capsys.readouterr().err


def test_schemas_ship_with_the_package():
    """The schemas are package data, read through importlib.resources: an installed fedrepro needs no checkout."""
    import importlib.resources

    from fedrepro.config import load_schema

    shipped = importlib.resources.files("fedrepro").joinpath("schemas")
    names = sorted(p.name for p in shipped.iterdir() if p.name.endswith(".schema.yaml"))
    assert names == ["compute.schema.yaml", "config.schema.yaml", "paper.schema.yaml", "partitions.schema.yaml"]
    for name in names:
        assert load_schema(name)["type"] == "object"
