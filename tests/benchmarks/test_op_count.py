"""benchmarks/op_count.py: the machine-independent count of tensor operations per training step, FCCO against plain.
Its counts are budgets here: a change that makes an FCCO step issue more small operations (the fixed cost of a small
model's step on a CPU core and on a GPU's host thread) fails this test instead of hiding in timing noise."""

import pytest

from builders import import_benchmark

#: operations an FCCO step may issue beyond its plain step (ADAP 75.1 when its budget was set, PAUCRange 63.1 when
#: its budget was lowered from 72; SONG 71, K-SONG 129 and SONEX 96 when theirs were set: raise a budget only with
#: a reason, in the commit that needs it)
BUDGETS = {"ADAP (MLP": 80, "PAUCRange inner step (MLP": 66, "SONG (NeuMF": 75, "K-SONG practical": 134,
           "SONEX GDRO-CVaR": 100}


@pytest.fixture(scope="module")
def op_count():
    return import_benchmark("op_count")


@pytest.mark.slow
def test_fcco_steps_stay_within_their_operation_budgets(op_count, tmp_path, one_thread):
    result = op_count.run(True, tmp_path, only=list(BUDGETS), log=lambda s: None)
    assert len(result) == len(BUDGETS)
    for name, (plain, fcco) in result.items():
        budget = next(b for prefix, b in BUDGETS.items() if name.startswith(prefix))
        assert 50 < plain < fcco, (name, plain, fcco)
        assert fcco - plain <= budget, f"{name}: {fcco - plain:.1f} operations a step beyond plain, budget {budget}"
    text = op_count.report(result, "python benchmarks/op_count.py --quick")
    assert text.count("\n| ADAP") == 1 and "| extra |" in text


@pytest.mark.slow
def test_lines_mode_attributes_operations_to_the_library_lines(op_count, tmp_path, one_thread):
    text = op_count.by_line("PAUCRange", True, tmp_path)
    assert text.startswith("PAUCRange inner step")
    assert "state.py:" in text and "(update)" in text and "objectives/pauc.py:" in text
    with pytest.raises(SystemExit, match="no case starts with 'nothing'"):
        op_count.by_line("nothing", True, tmp_path)
