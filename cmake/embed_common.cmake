# embed_common.cmake — what the embedding scripts share (included by embed_profiles.cmake and
# embed_text.cmake, which run as cmake -P).

# Sets VAR to TEXT as the body of a C string literal: escaped, no trigraphs, one source line
# per line of text.
function(weft_c_string var text)
  string(REPLACE "\\" "\\\\" text "${text}")
  string(REPLACE "\"" "\\\"" text "${text}")
  string(REPLACE "?" "\\?" text "${text}")
  string(REPLACE "\n" "\\n\"\n    \"" text "${text}")
  set(${var} "${text}" PARENT_SCOPE)
endfunction()

# Writes BODY to OUT only when it changed, so that what includes OUT is not rebuilt for nothing.
function(weft_write_if_changed out body)
  get_filename_component(dir ${out} DIRECTORY)
  file(MAKE_DIRECTORY ${dir})
  if(EXISTS ${out})
    file(READ ${out} old)
    if(old STREQUAL body)
      return()
    endif()
  endif()
  file(WRITE ${out} "${body}")
endfunction()
