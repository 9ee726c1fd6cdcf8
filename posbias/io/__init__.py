"""posbias's file formats, read and written in one place: reference YAML (``yaml_io``, ``schema``), profiles
(``profile_file``), kernels (``kernel_file``, ``array_headers``), CSV text and figures (``output``), atomic
output folders (``files``) and the versioned reports (``reports``). Imports neither commands nor backends."""
