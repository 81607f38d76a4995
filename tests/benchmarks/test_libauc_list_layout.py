"""LibAUC's ranking layout of learning-to-rank slates (benchmarks/reproduce/libauc_song.py, ``layout="lists"``), the
adapter that lets LibAUC's NDCGLoss train on the LETOR table's batches. Needs no LibAUC: the layout is ours."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

REPRODUCE = Path(__file__).resolve().parents[2] / "benchmarks" / "reproduce"


def test_the_list_layout_puts_the_relevant_documents_first_and_keeps_every_other_real_document():
    """A learning-to-rank slate in LibAUC's layout: the P slots hold the relevant documents (repeated cyclically when
    fewer, as LibAUC's sampler does), every other real document follows at its score, padding scores no surrogate;
    so (P + L) × LibAUC's mean squared hinge is the hinge's sum over the slots and the rest."""
    sys.path.insert(0, str(REPRODUCE))
    import libauc_song

    scores = torch.tensor([[0.5, 2.0, -1.0, 0.3, 9.0], [1.0, 0.1, 0.2, 0.4, 0.7]], requires_grad=True)
    batch = {"relevance": torch.tensor([[0.0, 2.0, 0.0, 1.0, 0.0], [3.0, 1.0, 2.0, 4.0, 0.0]]),
             "mask": torch.tensor([[True, True, True, True, False], [True] * 5]),
             "pair_index": torch.tensor([[-1, 7, -1, 8, -1], [0, 1, 2, 3, -1]]),
             "query": torch.tensor([4, 0]), "num_relevant": torch.tensor([2, 4]),
             "ideal_dcg": torch.tensor([3.6, 22.1])}
    predictions, fields = libauc_song.libauc_list_predictions(scores, batch, num_positives=3)
    pad = libauc_song.PADDING_SCORE
    torch.testing.assert_close(predictions, torch.tensor([
        [2.0, 0.3, 2.0, 0.5, pad, -1.0, pad, pad],      # 2 relevant in 3 slots: repeated; padding at column 4
        [1.0, 0.1, 0.2, pad, pad, pad, 0.4, 0.7]]))     # 4 relevant: the first 3 fill the slots, the 4th is a rest
    assert fields["rating"][:, :3].tolist() == [[2.0, 1.0, 2.0], [3.0, 1.0, 2.0]]
    assert fields["user_item_id"][:, :3].tolist() == [[7, 8, 7], [0, 1, 2]]
    assert fields["user_id"].tolist() == [4, 0] and fields["num_pos_items"].tolist() == [2, 4]
    predictions.sum().backward()
    # each real document's gradient counts its columns; padding gets none
    assert scores.grad.tolist() == [[1.0, 2.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0, 1.0]]
