"""Resident memory over epochs of the image data."""

from __future__ import annotations

from benchmarks.cases.images import IMAGE_BATCH
from benchmarks.harness.registry import SPEC, case, target, worker
from benchmarks.harness.worker import check

MEMORY_EPOCHS, MEMORY_QUICK_EPOCHS = 10, 2

case("memory", dataset="images_jpeg", unit="% RSS growth", repeats=1, quick_repeats=1, probe=False,
     measure=True,
     title=f"Resident memory over {MEMORY_EPOCHS} epochs of the image data (--quick: "
           f"{MEMORY_QUICK_EPOCHS}): each epoch's peak RSS of the main process + its live DataLoader "
           "workers (sampled every 50 ms and at every batch; a worker that finished its share has "
           "exited, so one sample at the last batch would count one worker or two); value = the "
           "largest later peak relative to epoch 1's (lower is better)",
     short=f"memory: RSS growth after epoch 1, {MEMORY_EPOCHS} epochs (lower is better)")


@worker("memory", "ours",
        note=f"TFRecordDataset(path, features=presets.tfds(), shuffle=True), set_epoch each epoch, "
             f"DataLoader(batch_size={IMAGE_BATCH}, num_workers=2, persistent_workers=False); "
             "psutil RSS of the process and its children")
def memory_ours(path):
    import psutil
    import torch.utils.data

    from tfrecord_torch import TFRecordDataset, presets

    epochs = MEMORY_QUICK_EPOCHS if SPEC.get("quick") else MEMORY_EPOCHS
    me = psutil.Process()
    ds = TFRecordDataset(path, features=presets.tfds(), shuffle=True, seed=0)

    def rss() -> tuple[int, int]:
        main = total = me.memory_info().rss
        for child in me.children(recursive=True):
            try:
                total += child.memory_info().rss
            except psutil.Error:
                pass
        return main, total

    peak = [0]

    def sample(stop) -> None:
        while not stop.wait(0.05):
            peak[0] = max(peak[0], rss()[1])

    def run():
        import threading

        totals, mains = [], []
        for epoch in range(epochs):
            ds.set_epoch(epoch)
            loader = torch.utils.data.DataLoader(ds, batch_size=IMAGE_BATCH, num_workers=2,
                                                 persistent_workers=False)
            tally = {"records": 0, "checksum": 0}
            peak[0] = 0
            stop = threading.Event()
            sampler = threading.Thread(target=sample, args=(stop,), daemon=True)
            sampler.start()
            for batch in loader:
                tally["records"] += len(batch["label"])
                tally["checksum"] += int(batch["label"].sum())
                peak[0] = max(peak[0], rss()[1])
            stop.set()
            sampler.join()
            del batch
            check(tally, SPEC["expected"])
            totals.append(peak[0])
            mains.append(rss()[0])  # after the epoch: the workers are gone
        growth = max((t - totals[0]) / totals[0] * 100 for t in totals[1:])
        main_growth = max((m - mains[0]) / mains[0] * 100 for m in mains[1:])
        mb = lambda vs: ", ".join(f"{v / 2**20:.0f}" for v in vs)
        return {"value": growth,
                "samples": {"total_rss": totals, "main_rss": mains},
                "detail": f"peak RSS per epoch, MB: {mb(totals)} (main process alone after each "
                          f"epoch: {mb(mains)}; its largest growth after epoch 1: {main_growth:+.1f}%)"}
    return run




target("memory", "RSS growth after epoch 1 < 10%", "ours", below=10.0)
