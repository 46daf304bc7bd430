"""A GGUF file's header is read once per process while transformers loads its tokenizer, config and weights."""
import gguf
import pytest
from transformers import modeling_gguf_pytorch_utils as hf_gguf

from magicpig.gguf_cache import _metadata, _reader, parsed_once
from magicpig.models import embedded_gguf_path


@pytest.fixture
def counted_readers(monkeypatch):
    """How many GGUFReader objects get built (each one parses the whole header)."""
    built = []
    init = gguf.gguf_reader.GGUFReader.__init__

    def counting(self, *args, **kwargs):
        built.append(args[0])
        init(self, *args, **kwargs)

    monkeypatch.setattr(gguf.gguf_reader.GGUFReader, "__init__", counting)
    _reader.cache_clear()
    _metadata.cache_clear()
    yield built
    _reader.cache_clear()
    _metadata.cache_clear()


def test_repeated_metadata_reads_parse_the_file_once(counted_readers):
    path = str(embedded_gguf_path())
    hf_gguf.load_gguf_checkpoint(path)
    assert len(counted_readers) == 1  # transformers alone: one reader per call
    with parsed_once():
        first = hf_gguf.load_gguf_checkpoint(path)  # the tokenizer's config
        first["config"]["edited"] = True  # callers edit what they get: each gets its own copy
        second = hf_gguf.load_gguf_checkpoint(path, return_tensors=False)  # the model's config
        reader = gguf.GGUFReader(path)  # what the weights' reading builds
        assert gguf.GGUFReader(path) is reader
    assert len(counted_readers) == 2
    assert "edited" not in second["config"] and second["config"]["model_type"] == "llama"
    assert second["tokenizer"]["tokens"][:3] == first["tokenizer"]["tokens"][:3]
    assert gguf.GGUFReader is gguf.gguf_reader.GGUFReader  # nothing stays replaced after the block
    assert hf_gguf.load_gguf_checkpoint.__module__ == hf_gguf.__name__
