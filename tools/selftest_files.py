"""The fake input files of the tools' self-tests (check_register_budget.py, gpu_step_perf.py):
one call writes a folder's worth, so a test reads as the files it plants."""
import os


def write_files(root, files):
    """Writes each {path relative to root: text}, making the folders on the way; returns
    {relative path: absolute path}."""
    paths = {}
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        paths[rel] = path
    return paths
