"""Table names shared by the table files, the report's CSV and the page, and the paper layout of a table."""

import pytest
from report_fixture import summary, target

from fedrepro.errors import ConfigError
from fedrepro.report.status import evaluate
from fedrepro.report.tables import in_cell, layouts, table_artifacts, table_names, table_slug, write_tables

ENTRY = {"kind": "gaussian_remark1", "params": {}}


def test_table_names():
    assert table_slug("Table 3") == "table3" and table_slug("Table 11", ["fedhdp.femnist"]) == "table11"
    assert (
        table_slug("Extra table: Table 1 protocol on Fashion-MNIST", ["adaped.table1_fmnist"]) == "extra-table1-fmnist"
    )
    # an extra table of several experiments is named by its words
    assert table_slug("Extra table: Table 1 on two sets", ["p.a", "p.b"]) == "extra-table-table-1-on-two-sets"


def test_the_registries_tables_have_readable_names(cfg):
    assert list(table_artifacts(cfg, "adaped").values()) == [
        "table1",
        "table2",
        "table3",
        "table4",
        "table5",
        "extra-table4-femnist-sample",
        "extra-table1-fmnist",
        "extra-table2-fmnist",
    ]
    assert list(table_artifacts(cfg, "fedhdp").values()) == [
        "table3",
        "table4",
        "table8",
        "table9",
        "table10",
        "table11",
    ]


def test_two_tables_with_one_name_are_a_config_error():
    rows = [
        target(id="a", artifact="Extra table: X", experiment="adaped.t1"),
        target(id="b", artifact="Extra table: Y", experiment="adaped.t1"),
    ]
    with pytest.raises(ConfigError, match="would both be named 'extra-t1'"):
        table_names(rows, "config/targets/adaped.csv")


def test_a_table_printing_two_datasets_is_laid_out_one_block_each(cfg):
    def row(rid, exp, setting, col="Acc_g", **kw):
        return evaluate(
            cfg,
            target(id=rid, experiment=exp, setting=setting, table_row="FedAvg", table_col=col, **kw),
            "paper",
            summary(10.0),
            ENTRY,
        )

    results = [
        row("n.acc", "p.noniid", "non-IID MNIST; FedAvg"),
        row("n.acc.var", "p.noniid", "non-IID MNIST; v"),
        row("n.d", "p.noniid", "non-IID MNIST; FedAvg", col="D_g"),
        row("s.acc", "p.skewed", "skewed MNIST; FedAvg"),
        row("s.acc.var", "p.skewed", "skewed MNIST; v"),
    ]
    (lay,) = layouts(results)
    assert lay.name == "table3" and [b.label for b in lay.blocks] == ["non-IID MNIST", "skewed MNIST"]
    noniid, skewed = lay.blocks
    assert noniid.cols == ["Acc_g", "D_g"] and skewed.cols == ["Acc_g"]
    assert [r.target.id for r in noniid.cells[("FedAvg", "Acc_g")]] == ["n.acc", "n.acc.var"]
    # one experiment: one block, however many numbers share a cell
    (single,) = layouts(results[:3])
    assert [b.label for b in single.blocks] == [""]
    assert in_cell(["93.75", "0.13"]) == "93.75 (0.13)" and in_cell([]) == ""


def test_table_files_show_every_cell(cfg, tmp_path):
    """Before the blocks, the second dataset's cells overwrote the first's in results/tables/<paper>/table3.md."""
    written = write_tables(cfg, "fedhdp", tmp_path, only="table3")
    md = (tmp_path / "table3.md").read_text(encoding="utf-8")
    assert [p.name for p in written] == ["table3.csv", "table3.md"]
    assert "— non-IID MNIST (3.6,1e-4)-DP" in md and "— Skewed non-IID MNIST (3.6,1e-4)-DP" in md
    assert "93.75 (0.13)" in md and "93.62 (0.15)" in md
    with pytest.raises(ConfigError, match="no table 'table7'"):
        write_tables(cfg, "fedhdp", tmp_path, only="table7")


def test_columns_in_printed_order_when_rows_skip_some():
    from fedrepro.report.tables import _merged_order

    # the non-private baseline prints no private column; the full row shows where it goes
    assert _merged_order(
        [["Acc_g", "Acc_g,np", "Acc_l,np"], ["Acc_g", "Acc_g,p", "Acc_g,np", "D_g", "Acc_l,p", "Acc_l,np"]]
    ) == ["Acc_g", "Acc_g,p", "Acc_g,np", "D_g", "Acc_l,p", "Acc_l,np"]
    assert _merged_order([["a", "b"], ["b", "a"]]) == ["a", "b"]  # contradictory rows: first appearance
