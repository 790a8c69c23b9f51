import pytest
import torch

from heterofold_hub.transfer.alignment import align_batch, align_sequence, char_owner, layers_by_depth, leading_empty
from heterofold_hub.errors import AlignmentError

T = lambda *spans: torch.tensor(spans, dtype=torch.long).view(-1, 2)


def test_many_to_one_and_one_to_many():
    sender = T((0, 0), (0, 6), (6, 8), (8, 9), (9, 12))  # BOS, "abcdef", "gh", "i", "jkl"
    receiver = T((0, 2), (2, 4), (4, 9), (9, 12))  # "ab" "cd" inside sender 1; "efghi" spans 1..3
    assert align_sequence(sender, receiver, 12).tolist() == [1, 1, 3, 4]


def test_uncovered_characters_look_back_and_leading_gap_uses_first_content_token():
    sender = T((1, 3), (4, 6))  # chars 0 and 3 belong to no sender token (dropped spaces)
    assert char_owner(sender, 6).tolist() == [-1, 0, 0, 0, 1, 1]
    receiver = T((0, 1), (1, 4), (4, 6))
    assert align_sequence(sender, receiver, 6).tolist() == [0, 0, 1]


def test_overlapping_sender_spans_take_the_last_token():
    sender = T((0, 2), (1, 3))  # byte-level BPE can split one character across two tokens
    assert char_owner(sender, 3).tolist() == [0, 1, 1]


def test_receiver_special_tokens_become_the_native_prefix():
    sender = T((0, 0), (0, 3), (3, 5))
    receiver = [T((0, 0), (0, 2), (2, 5))]
    alignment = align_batch([sender], receiver, [torch.tensor([1, 7, 8])], [5])
    assert alignment.native_prefix == 1 and leading_empty(receiver[0]) == 1
    assert alignment.native_mask.tolist() == [[True, False, False]]
    assert alignment.sender_index.tolist() == [[1, 1, 2]]


def test_batch_is_left_padded_with_generate_positions():
    sender = [T((0, 2), (2, 4)), T((0, 4))]
    receiver = [T((0, 1), (1, 2), (2, 4)), T((0, 4))]
    with pytest.raises(AlignmentError, match="longer context"):
        align_batch(sender, receiver, [torch.arange(3), torch.arange(1)], [4, 4])
    receiver[1] = T((0, 2), (2, 4))
    a = align_batch(sender, receiver, [torch.arange(3), torch.arange(2)], [4, 4])
    assert a.attention_mask.tolist() == [[1, 1, 1], [0, 1, 1]]
    assert a.receiver_positions.tolist() == [[0, 1, 2], [0, 0, 1]]
    assert a.sender_index.tolist() == [[0, 0, 1], [0, 0, 0]]
    assert a.mapped_mask.tolist() == [[False, True, True], [False, False, True]]


@pytest.mark.parametrize("sender", [T(), T((0, 0)), T((0, 0), (0, 0))])
def test_context_without_characters_is_refused(sender):
    with pytest.raises(AlignmentError, match="covers no characters"):
        align_sequence(sender, T((0, 1)), 1)


def test_layers_by_depth():
    assert layers_by_depth(6, 4) == [[0, 1], [1, 2], [3, 4], [4, 5]]
    assert layers_by_depth(4, 6)[0] == [0, 1] and layers_by_depth(4, 6)[-1] == [2, 3]
    assert layers_by_depth(1, 3, k=2) == [[0], [0], [0]]


def test_one_padding_helper_pads_either_side_and_numbers_positions_as_generate_does():
    from heterofold_hub.transfer.padding import padded, positions

    ids, mask = padded([[5, 6, 7], [8]], 0, side="left")
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]] and mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert positions(mask).tolist() == [[0, 1, 2], [0, 0, 0]]
    ids, mask = padded([torch.tensor([8]), torch.tensor([5, 6, 7])], 9, side="right")
    assert ids.tolist() == [[8, 9, 9], [5, 6, 7]] and mask.tolist() == [[1, 0, 0], [1, 1, 1]]
    assert positions(torch.tensor([[False, True, False, True]])).tolist() == [[0, 0, 0, 1]]
    with pytest.raises(ValueError, match="side='middle'; choose one of left, right"):
        padded([[1]], 0, side="middle")
