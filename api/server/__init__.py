"""The HTTP server: the app (app.py), its shared pieces, and one router module per dialect."""
