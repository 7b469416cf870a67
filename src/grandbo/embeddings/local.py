"""The local provider: all-MiniLM-L6-v2 run by fastembed (ONNX Runtime) from a prepared folder.

No network and no torch at query time: `grandbo models prepare` writes the ONNX export once, and
this provider only reads it. The model embeds up to 256 word pieces per text, like the original
sentence-transformers model; longer texts are truncated.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from grandbo.config import Settings
from grandbo.embeddings.base import Purpose, register
from grandbo.errors import EmbeddingError, ModelNotPreparedError

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
DIMENSION = 384
MODEL_FILE = "model.onnx"

# A query is a few dozen word pieces: the tokenizer's pool of threads (rayon, one per core) costs more in waking
# and switching than it saves, and a server's query lanes each keep the model on one core (`batching`). Set for
# the process unless the operator set it; read by `tokenizers` at each call. Measured in `grandbo bench serve`
# (16 clients, load 9-12): 10-12 thread switches a recall gone, the server's CPU 0.5-2.2 ms a recall less (3 pairs).
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


class LocalProvider:
    name = "local"
    model = MODEL_NAME
    dimension = DIMENSION
    # Calibrated on the shipped incident set: unrelated incident text rarely passes 0.25 with
    # this model, while paraphrases of the same problem sit around 0.45-0.75 (see docs/evaluation.md).
    min_similarity = 0.25

    def __init__(self, model_dir: Path, threads: int | None = None) -> None:
        if not (model_dir / MODEL_FILE).is_file():
            raise ModelNotPreparedError(
                f"The local embedding model is not prepared in {model_dir}. Run `grandbo models prepare` "
                "(or `make setup`) once; it exports all-MiniLM-L6-v2 to ONNX for offline use.",
                detail={"model_dir": str(model_dir)},
            )
        self.model_dir = model_dir
        self.threads = threads
        self._model: Any = None
        self._lock = threading.Lock()

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                from fastembed import TextEmbedding

                model = TextEmbedding(
                    MODEL_NAME,
                    specific_model_path=str(self.model_dir),
                    local_files_only=True,
                    threads=self.threads,
                    lazy_load=True,  # its tokenizer and session loaded below: the session with an option of ours
                )
                try:  # fastembed 0.9's ONNX model: its tokenizer and session are plain attributes, set as it would
                    from fastembed.common.preprocessor_utils import load_tokenizer

                    inner: Any = model.model
                    inner.tokenizer, inner.special_token_to_id = load_tokenizer(model_dir=self.model_dir)
                    inner.model = _session(self.model_dir / MODEL_FILE, self.threads)
                except (ImportError, AttributeError):  # another layout: fastembed loads its own (threads that spin)
                    pass
                self._model = model
            return self._model

    def embed(self, texts: Sequence[str], purpose: Purpose = "document") -> list[np.ndarray]:
        model = self._load()
        try:
            return list(model.embed(list(texts), batch_size=32))
        except Exception as error:  # ONNX Runtime raises its own types; keep the cause
            raise EmbeddingError(
                f"The local model failed to embed {len(texts)} texts: {error}",
                detail={"provider": self.name},
            ) from error


def _session(path: Path, threads: int | None) -> Any:
    """The ONNX Runtime session fastembed makes (every graph optimization; `threads` for both pools when given),
    whose threads wait for work asleep rather than spinning. Spinning kept every thread of a many-threaded session
    busy between calls and, on a shared machine, each waiting on the others that were not running: the server's
    session for a lone query (`batching`) cost 28-30 ms of CPU a query at load 12, against 14-16 ms without it."""
    import onnxruntime as ort  # type: ignore[import-untyped]

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads is not None:
        options.intra_op_num_threads = options.inter_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    # fastembed's choice: CUDA where ONNX Runtime has it (a GPU build installed), the CPU otherwise.
    cuda = "CUDAExecutionProvider" in ort.get_available_providers()
    return ort.InferenceSession(str(path), sess_options=options,
                                providers=["CUDAExecutionProvider" if cuda else "CPUExecutionProvider"])  # fmt: skip


@register("local")
def _factory(settings: Settings) -> LocalProvider:
    return LocalProvider(settings.model_dir, settings.local_threads)
