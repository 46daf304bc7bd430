"""The textual method spec: round trips and errors that name the field."""
import pytest

from magicpig import parse_method
from magicpig.methods import METHODS, method_fields


@pytest.mark.parametrize("spec", ["dense", "magicpig", "magicpig:K=10,L=150", "magicpig:K=8,L=75,centering=false",
                                  "magicpig:min_collisions=1,share_projections=true,dense_layers=0/3",
                                  "quest:page_size=16,ratio=0.04", "topk:budget=0.02", "topk:budget=64",
                                  "oracle:budget=0.05", "streaming:sinks=4,local=128", "magicpig:dense_layers=none",
                                  "magicpig:projection_draw=fixed,seed=7", "streaming:sinks=0,local=8"])
def test_round_trip(spec):
    m = parse_method(spec)
    assert parse_method(m.spec()) == m
    assert parse_method(m.spec()).spec() == m.spec()


def test_values_are_typed():
    m = parse_method(" magicpig: K = 9 , L=120, centering=off ")
    assert (m.K, m.L, m.centering) == (9, 120, False)
    assert parse_method("topk:budget=64").budget == 64.0
    assert parse_method("magicpig:dense_layers=0/16").dense_layers == (0, 16)


@pytest.mark.parametrize("spec,pattern", [
    ("nope", "unknown attention method 'nope'.*magicpig"),
    ("magicpig:k=10", "no field 'k'.*K, L"),
    ("magicpig:K=ten", "field 'K' expects int"),
    ("magicpig:K=0", "K must"),
    ("magicpig:K=16,L=1000", "K\\*L"),
    ("magicpig:L=1", "min_collisions"),
    ("magicpig:centering=maybe", "field 'centering' expects bool"),
    ("magicpig:K", "expected field=value"),
    ("magicpig:K=10,K=11", "given twice"),
    ("quest:ratio=0", "'ratio'"),
    ("quest:page_size=0", "'page_size'"),
    ("topk:budget=-1", "'budget'"),
    ("streaming:sinks=-1", "'sinks'"),
    ("", "non-empty"),
    ("topk:budget=1.5", "'budget'.*integer key count"),
    ("oracle:budget=2.5", "'budget'.*integer key count"),
    ("topk:budget=inf", "'budget'"),
    ("oracle:budget=1e300", "'budget'"),
    ("topk:budget=nan", "'budget'"),
    ("streaming:sinks=0,local=0", "'sinks' and 'local' are both 0"),
    ("magicpig:seed=1180591620717411303424", r"seed must be an integer in \[0, 4611686018427387903\]"),
    ("magicpig:seed=-1", "seed must be"),
    ("magicpig:min_collisions=151", r"min_collisions.*\[1, 150\]"),
    ("magicpig:L=1", r"min_collisions \(default 2\) must be.*L=1"),
    ("magicpig:projection_draw=sometimes", "'projection_draw' expects one of per_sample|fixed"),
    ("magicpig:dense_layers=-1", "'dense_layers'.*>= 0"),
])
def test_bad_specs_name_the_problem(spec, pattern):
    with pytest.raises(ValueError, match=pattern):
        parse_method(spec)


def test_every_method_lists_its_fields():
    for name in METHODS:
        fields = [f for f, _, _ in method_fields(name)]
        assert "dense_layers" in fields


def test_cli_lists_methods(capsys):
    from magicpig.harness.cli import main

    assert main(["methods"]) == 0
    out = capsys.readouterr().out
    for name in METHODS:
        assert f"{name}:" in out
    assert "min_collisions" in out
    assert "projection_draw" in out and "per_sample|fixed" in out


@pytest.mark.parametrize("a,b", [
    ("magicpig", "magicpig:K=10,L=150"),
    ("magicpig:L=150,K=9", "magicpig: K=9"),
    ("magicpig:centering=off", "magicpig:centering=false,min_collisions=2"),
    ("magicpig", "magicpig:projection_draw=per_sample,seed=43"),
    ("quest", "quest:ratio=0.040,page_size=16"),
    ("topk:budget=64.0", "topk:budget=64"),
    ("topk:budget=.5", "topk:budget=5e-1"),
    ("magicpig:dense_layers=16/0/16", "magicpig:dense_layers=0/16"),
])
def test_equivalent_specs_have_one_canonical_form(a, b):
    from magicpig.methods import canonical_spec

    assert canonical_spec(a) == canonical_spec(b) == parse_method(a).spec()
    assert canonical_spec(canonical_spec(a)) == canonical_spec(a)


def test_canonical_spec_orders_fields_and_keeps_differences():
    from magicpig.methods import canonical_spec

    assert canonical_spec("magicpig:local=24,K=8,L=75") == "magicpig:K=8,L=75,local=24"
    assert canonical_spec("magicpig:projection_draw=fixed") != canonical_spec("magicpig")
    assert canonical_spec("magicpig:dense_layers=none") != canonical_spec("magicpig")


def test_report_canonical_uses_canonical_spec():
    from magicpig.harness.results_tree import canonical

    assert canonical("quest:page_size=16,ratio=0.04") == canonical("quest") == "quest"
    assert canonical("magicpig:dense_layers=16/0") == "magicpig:dense_layers=0/16"
    assert canonical("not-a-method") == "not-a-method"


def test_eval_rejects_equivalent_methods():
    from magicpig.methods.spec_names import read_methods, split_methods

    with pytest.raises(ValueError, match="'magicpig' and 'magicpig:K=10,L=150' are the same method"):
        read_methods("magicpig;magicpig:K=10,L=150")
    with pytest.raises(ValueError, match="same method"):
        read_methods(["quest:page_size=16", "quest:ratio=0.04"])
    assert [m.text for m in read_methods("magicpig;magicpig:projection_draw=fixed")] == [
        "magicpig", "magicpig:projection_draw=fixed"]
    assert split_methods("nope;dense") == ["nope", "dense"]  # split only: the parse is read_methods'
    with pytest.raises(ValueError, match="unknown attention method 'nope'"):
        read_methods("nope;dense")
