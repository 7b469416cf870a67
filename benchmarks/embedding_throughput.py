"""The local model's own embedding rate against Grandbo's import rate with it, on the same texts, in one run.

Texts are the shipped incident memories and generated ones (short, incident-length). The model's rate is
fastembed embedding the texts directly; Grandbo's rate is `remember_many` in strict mode (write, claim the
embed jobs, embed, write the vectors), so the ratio is the cost of everything around the model.

    python benchmarks/embedding_throughput.py [--texts 1000]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

from grandbo.config import Settings
from grandbo.embeddings.base import get_provider
from grandbo.eval.bench import synthetic_entry
from grandbo.model import entry_text
from grandbo.service import Grandbo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=1000)
    args = parser.parse_args()
    rng = random.Random(3)
    entries = [synthetic_entry(rng, n) for n in range(args.texts)]
    texts = [entry_text(e.title, e.body, e.tags, e.services) for e in entries]
    base = Settings()
    provider = get_provider("local", base)
    provider.embed(texts[:32])  # load the model outside the timing
    start = time.perf_counter()
    for offset in range(0, len(texts), base.embed_batch_size):
        provider.embed(texts[offset : offset + base.embed_batch_size])
    model_rate = len(texts) / (time.perf_counter() - start)
    with tempfile.TemporaryDirectory() as scratch:
        settings = base.model_copy(update={"home": Path(scratch), "local_model_dir": base.model_dir})
        with Grandbo.init(settings, embedding="local") as grandbo:
            memory = grandbo.org("throughput", create=True)
            grandbo.provider().embed(texts[:32])
            start = time.perf_counter()
            memory.remember_many(entries, strict=True)
            grandbo_rate = len(texts) / (time.perf_counter() - start)
    print(json.dumps({"texts": len(texts), "model_texts_per_s": round(model_rate, 1),
                      "grandbo_import_per_s": round(grandbo_rate, 1),
                      "grandbo_over_model": round(grandbo_rate / model_rate, 3)}))  # fmt: skip


if __name__ == "__main__":
    main()
