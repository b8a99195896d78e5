"""What tests share that is neither a fixture nor a stand-in: paths, a real `serve`."""
