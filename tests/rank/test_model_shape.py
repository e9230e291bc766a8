"""Reading the user's model from the module their DeepSpeed script trains (the hook's view),
and the decoder the estimator plans for from it."""

import torch
from torch import nn

from autotune.rank.model_shape import read_shape, token_ids


class ScriptLM(nn.Module):
    """The model of tests/data/user_scripts/ds_train.py: untied embedding and output layer."""

    def __init__(self, vocab: int, width: int, layers: int, tied: bool = False) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        block = nn.TransformerEncoderLayer(width, 4, 4 * width, batch_first=True)
        self.blocks = nn.TransformerEncoder(block, num_layers=layers)
        self.head = nn.Linear(width, vocab, bias=not tied)
        if tied:
            self.head.weight = self.embed.weight


def test_a_script_model_reads_as_the_decoder_it_is() -> None:
    tokens = torch.randint(0, 8192, (4, 128))
    shape = read_shape(ScriptLM(8192, 256, 4), tokens)
    assert shape is not None
    assert (shape.vocab_size, shape.hidden_size, shape.seq_length) == (8192, 256, 128)
    assert not shape.tied_embeddings and shape.parameters > 7_000_000
    w = shape.workload("ds_train", 32, "fp32")
    assert (w.num_layers, w.ffn_hidden_size, w.global_batch_size) == (4, 1024, 32)
    assert abs(w.num_parameters / shape.parameters - 1) < 0.01  # the estimator's count agrees


def test_tied_embeddings_are_counted_once() -> None:
    shape = read_shape(ScriptLM(32000, 512, 6, tied=True), torch.zeros(1, 64, dtype=torch.long))
    assert shape is not None and shape.tied_embeddings
    assert shape.workload("hf", 8, "bf16").num_layers == 6


def test_a_model_without_embedding_or_token_ids_is_not_guessed() -> None:
    assert read_shape(nn.Sequential(nn.Linear(4, 4)), torch.zeros(1, 4)) is None
    ids = torch.ones(2, 16, dtype=torch.long)
    assert token_ids((torch.randn(2, 16),), {"input_ids": ids}) is ids  # Hugging Face
    assert token_ids((ids,), {}) is ids
    assert token_ids((torch.randn(2, 16), torch.ones(3, dtype=torch.long)), {}) is None
