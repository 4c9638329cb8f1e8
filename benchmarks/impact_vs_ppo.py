"""Former name of :mod:`benchmarks.run` (kept so that older commands still work): same flags."""

from benchmarks.run import main

if __name__ == "__main__":
    main()
