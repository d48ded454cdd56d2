"""The health dashboard: a Streamlit app over a store (``gpuwarden dashboard``).

``data`` holds every query the pages show, as plain functions returning pandas frames, so the
numbers are testable without a browser; ``app`` draws them. Streamlit and Altair are the
``dashboard`` extra (``pip install 'gpuwarden[dashboard]'``) and are imported only by the app.
"""
