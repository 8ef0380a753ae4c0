"""``python -m example_app``: serve the demo on 127.0.0.1, port 5000 or $PORT."""

import os

from . import create_app

if __name__ == "__main__":
    create_app().run(host="127.0.0.1", port=int(os.environ.get("PORT", "5000")))
