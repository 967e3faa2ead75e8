# webui_gzip.cmake — script (cmake -P): GZ = gzip -9 of IN, through CMake's libarchive (no gzip
# tool needed). Run from IN's directory so that the header names only the file.
file(ARCHIVE_CREATE OUTPUT ${GZ} PATHS ${IN} FORMAT raw COMPRESSION GZip COMPRESSION_LEVEL 9)
