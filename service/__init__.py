"""The Shoebox service: the Flask API, the command line and the workers."""
