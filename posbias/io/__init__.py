"""posbias's file formats read and written in one place (begun with the versioned reports, ``reports``;
the older formats, posbias/yaml_io.py, profile_file.py, kernel_file.py and files.py, move here next)."""
