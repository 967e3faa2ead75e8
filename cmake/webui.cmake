# webui.cmake — embeds the chat page (src/server/ui/) and the Debian-packaged libraries it uses
# (marked, DOMPurify, highlight.js) into rocmforge_server at build time (docs/webui.md).
# A library that is not installed is left out with a warning; the page then shows replies as
# plain text (marked or DOMPurify missing) or without code colours (highlight.js missing).

# Where Debian's packages put the files (dpkg -L); override on other systems.
set(RF_WEBUI_MARKED "/usr/share/javascript/marked/marked.min.js" CACHE FILEPATH "marked (libjs-marked)")
set(RF_WEBUI_PURIFY "/usr/share/nodejs/dompurify/dist/purify.min.js" CACHE FILEPATH "DOMPurify (node-dompurify)")
set(RF_WEBUI_HLJS "/usr/share/javascript/highlight.js/highlight.min.js" CACHE FILEPATH "highlight.js (libjs-highlight.js)")
set(RF_WEBUI_HLJS_STYLES "/usr/share/javascript/highlight.js/styles" CACHE PATH "highlight.js styles (libjs-highlight.js)")

set(_ui ${PROJECT_SOURCE_DIR}/src/server/ui)
# "url|file" pairs; the page's own files always, the libraries when present
set(_assets "/|${_ui}/index.html" "/ui/app.css|${_ui}/app.css" "/ui/app.js|${_ui}/app.js"
            "/ui/favicon.svg|${_ui}/favicon.svg")
set(_missing "")
macro(_rf_webui_lib url file pkg)
  if(EXISTS "${file}")
    list(APPEND _assets "${url}|${file}")
  else()
    list(APPEND _missing "${pkg}")
    list(APPEND _absent "${url}")
    message(WARNING "webui: ${file} not found (Debian package ${pkg}); the page is built without it. "
                    "Install it (scripts/setup.sh) and re-run cmake.")
  endif()
endmacro()
set(_absent "")
_rf_webui_lib(/ui/lib/marked.min.js "${RF_WEBUI_MARKED}" libjs-marked)
_rf_webui_lib(/ui/lib/purify.min.js "${RF_WEBUI_PURIFY}" node-dompurify)
_rf_webui_lib(/ui/lib/highlight.min.js "${RF_WEBUI_HLJS}" libjs-highlight.js)
_rf_webui_lib(/ui/lib/hljs-light.css "${RF_WEBUI_HLJS_STYLES}/github.css" libjs-highlight.js)
_rf_webui_lib(/ui/lib/hljs-dark.css "${RF_WEBUI_HLJS_STYLES}/atom-one-dark.css" libjs-highlight.js)
list(REMOVE_DUPLICATES _missing)
if(_missing)
  string(REPLACE ";" ", " _m "${_missing}")
  message(STATUS "ROCmForge: web UI without ${_m}")
else()
  message(STATUS "ROCmForge: web UI with marked, DOMPurify, highlight.js")
endif()

set(_out ${CMAKE_BINARY_DIR}/generated/webui_assets.c)
set(_deps ${PROJECT_SOURCE_DIR}/cmake/webui_embed.cmake ${PROJECT_SOURCE_DIR}/cmake/webui_gzip.cmake)
foreach(a ${_assets})
  string(REPLACE "|" ";" _pair "${a}")
  list(GET _pair 1 _f)
  list(APPEND _deps "${_f}")
endforeach()
# the lists travel to the script through a file: they hold ';' and '|'
file(WRITE ${CMAKE_BINARY_DIR}/generated/webui_assets.list.in "set(ASSETS \"${_assets}\")\nset(ABSENT \"${_absent}\")\n")
configure_file(${CMAKE_BINARY_DIR}/generated/webui_assets.list.in ${CMAKE_BINARY_DIR}/generated/webui_assets.list COPYONLY)
add_custom_command(OUTPUT ${_out}
  COMMAND ${CMAKE_COMMAND} -DLIST=${CMAKE_BINARY_DIR}/generated/webui_assets.list -DOUT=${_out}
          -DWORK=${CMAKE_BINARY_DIR}/generated/webui -P ${PROJECT_SOURCE_DIR}/cmake/webui_embed.cmake
  DEPENDS ${_deps} ${CMAKE_BINARY_DIR}/generated/webui_assets.list
  COMMENT "Embedding the web UI (${_out})" VERBATIM)
target_sources(rocmforge_server PRIVATE ${_out})
