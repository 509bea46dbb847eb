# src/backends/sim — the simulated machine (issue 6): the sim backend, its discrete-event
# model, machine profiles (with the shipped ones compiled in) and `weft calibrate`.
set(WEFT_SIM_PROFILES
  ${CMAKE_CURRENT_SOURCE_DIR}/profiles/h100.json
  ${CMAKE_CURRENT_SOURCE_DIR}/profiles/h200x2.json
  ${CMAKE_CURRENT_SOURCE_DIR}/profiles/h200x4.json)
set(WEFT_SIM_PROFILES_C ${CMAKE_CURRENT_BINARY_DIR}/generated/sim_profiles_data.c)
add_custom_command(
  OUTPUT ${WEFT_SIM_PROFILES_C}
  COMMAND ${CMAKE_COMMAND} "-DOUT=${WEFT_SIM_PROFILES_C}" "-DIN=${WEFT_SIM_PROFILES}"
          -P ${CMAKE_CURRENT_SOURCE_DIR}/src/backends/sim/embed_profiles.cmake
  DEPENDS ${WEFT_SIM_PROFILES} ${CMAKE_CURRENT_SOURCE_DIR}/src/backends/sim/embed_profiles.cmake
  COMMENT "Embedding the shipped machine profiles"
  VERBATIM)
list(APPEND WEFT_SOURCES
  src/backends/sim/json.c
  src/backends/sim/profile.c
  src/backends/sim/sim_backend.c
  src/backends/sim/des.c
  src/backends/sim/calibrate.c
  ${WEFT_SIM_PROFILES_C})
