from fedrepro.cli import main

if __name__ == "__main__":  # not when a worker process started by spawn imports the main module again
    raise SystemExit(main())
