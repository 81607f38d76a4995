"""benchmarks/cold_ops.py: a small operation's cost inside a step (after the model's products, after an idle wait)
against the same operation back to back; its quick mode runs here so that it cannot rot."""

from builders import import_benchmark


def test_cold_ops_times_every_call_in_every_condition(one_thread, capsys):
    cold_ops = import_benchmark("cold_ops")
    result = cold_ops.main(["--quick"])
    assert set(result) == {"IndexedState.update, 64 rows", "one add of 64 numbers", "loader batch, 256 rows"}
    for name, conditions in result.items():
        assert list(conditions) == ["warm", "after products", "after 3 ms idle"], name
        assert all(0.0 < us < 1e5 for us in conditions.values()), (name, conditions)
    text = capsys.readouterr().out
    assert text.count("\n| ") == 4 and "| after products / warm |" in text  # the header and three rows
