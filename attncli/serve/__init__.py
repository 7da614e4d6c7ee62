"""`attncli serve`: runs behind HTTP, a language pair each, with a page that shows attention.

Imports every layer up to `runs` (a trained run, decoded), never `bench`. One job per module,
in the order a request meets them:

    command.py     the CLI command: load each run once, bind, run uvicorn, stop gracefully
    stopping.py    how a stop signal ends the server, from its first instant to its last
    app.py         the ASGI app (Starlette): routes, origin and key checks, errors as JSON
    openapi.py     GET /spec: the routes described in OpenAPI 3.0 (what the tests fuzz)
    requests.py    request bodies checked and turned into typed requests, or one-line errors
    language_id.py which language a text is in (/detect, "source": "auto"), by py3langid
    pairs.py       the runs served by language pair: which run a request goes to
    batcher.py     the bounded queue and the decoding thread that batches requests together
    served_run.py  decoding and attention with a run's model, and what responses hold
    documents.py   a request's texts as documents: split, decoded as one job, joined back
    markup.py      "format": "html": a page's blocks of text, and the page rebuilt around
                   their translations, inline tags placed by the model's cross-attention
    static/        the page at / (HTML, CSS, JS; shipped in the package, no CDN, no build)

Starlette, uvicorn and py3langid are the optional extra `serve` (`pip install
'attncli[serve]'`).
"""
