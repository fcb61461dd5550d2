# cmake -DIN=... -DOUT=... -DPROJECT_VERSION=... -P configure_version.cmake: writes IN to OUT with
# @PROJECT_VERSION@ replaced (devplace/__init__.py's __version__), rewriting OUT only when it changes.
configure_file(${IN} ${OUT} @ONLY)
