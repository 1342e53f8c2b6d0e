"""python3 -m presto: the daemon's state from Python, for a quick check that
the binding finds libprestoclient and reaches prestod.

    python3 -m presto [-s SOCKET] stats       the stats document (JSON)
    python3 -m presto [-s SOCKET] datasets    the datasets served (JSON)
    python3 -m presto [-s SOCKET] epoch DATASET [-b N] [-e E] [--transport T]
                                              pull one epoch, print samples/s
    python3 -m presto version                 the library's version

Failures print one line ("presto: ...") and exit 1; usage errors exit 2.
"""

import argparse
import json
import sys
import time


def main(argv=None):
    p = argparse.ArgumentParser(prog="python3 -m presto",
                                description="Ask prestod through libprestoclient.")
    p.add_argument("-s", "--socket", help="daemon socket (default: as libprestoclient finds "
                   "it: $PRESTO_SOCKET, $XDG_RUNTIME_DIR/presto/prestod.sock, ...)")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("stats", help="the daemon's statistics (JSON)")
    sub.add_parser("datasets", help="the datasets it serves (JSON)")
    sub.add_parser("version", help="libprestoclient's version")
    e = sub.add_parser("epoch", help="pull one epoch and report its throughput")
    e.add_argument("dataset")
    e.add_argument("-b", "--batch-size", type=int, default=64)
    e.add_argument("-e", "--epoch", type=int, default=0)
    e.add_argument("--transport", choices=["auto", "shm", "socket"], default="auto")
    a = p.parse_args(argv)

    try:
        import presto
    except ImportError as err:  # libprestoclient not found: say how to point at it
        print("presto: %s" % err, file=sys.stderr)
        return 1
    if a.command == "version":
        print(presto.version())
        return 0
    try:
        with presto.Client(a.socket) as client:
            if a.command in ("stats", "datasets"):
                doc = client.stats() if a.command == "stats" else client.datasets()
                json.dump(doc, sys.stdout, indent=2)
                print()
                return 0
            start = time.perf_counter()
            samples = batches = 0
            with client.stream(a.dataset, batch_size=a.batch_size, epoch=a.epoch,
                               transport=a.transport) as stream:
                transport = stream.info.transport
                for batch in stream:
                    samples += len(batch)
                    batches += 1
            secs = time.perf_counter() - start
            print(json.dumps({"dataset": a.dataset, "epoch": a.epoch, "samples": samples,
                              "batches": batches, "seconds": round(secs, 6),
                              "samples_per_s": round(samples / secs, 1) if secs else 0,
                              "transport": transport}))
            return 0
    except presto.PrestoError as err:
        print("presto: %s" % err, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
