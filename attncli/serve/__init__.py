"""`attncli serve`: a run behind HTTP, with a page that shows its attention.

Imports every layer up to `runs` (a trained run, decoded), never `bench`. One job per module,
in the order a request meets them:

    command.py     the CLI command: load the run once, bind, run uvicorn, stop gracefully
    app.py         the ASGI app (Starlette): routes, origin and key checks, errors as JSON
    requests.py    request bodies checked and turned into typed requests, or one-line errors
    batcher.py     the bounded queue and the decoding thread that batches requests together
    translator.py  decoding and attention with the run's model, and what responses hold
    static/        the page at / (HTML, CSS, JS; shipped in the package, no CDN, no build)

Starlette and uvicorn are the optional extra `serve` (`pip install 'attncli[serve]'`).
"""
