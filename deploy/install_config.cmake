# Run by `cmake --install` (and CPack): installs the systemd unit and the flag file with the
# paths of the prefix being installed to. Prefix /usr (the .deb) puts the flag file in /etc, as
# the FHS wants; any other prefix keeps it under PREFIX/etc.
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(etc_dir "/etc/devplace")
else()
  set(etc_dir "${CMAKE_INSTALL_PREFIX}/etc/devplace")
endif()
if(IS_ABSOLUTE "${DEVPLACE_SBINDIR}")
  set(sbin_dir "${DEVPLACE_SBINDIR}")
else()
  set(sbin_dir "${CMAKE_INSTALL_PREFIX}/${DEVPLACE_SBINDIR}")
endif()

file(READ "${DEVPLACE_UNIT_SOURCE}" unit)
string(REPLACE "/usr/sbin/devplaced" "${sbin_dir}/devplaced" unit "${unit}")
string(REPLACE "/etc/devplace/" "${etc_dir}/" unit "${unit}")
# Staged under a name of this install's own: a `cmake --install` into some prefix and CPack's
# install into /usr may run from one build tree at once (ctest -j runs the install and .deb tests
# side by side), and one shared staging file let each install the other's unit.
string(RANDOM LENGTH 16 staging_id)
set(staged "${DEVPLACE_STAGING_DIR}/devplaced-${staging_id}.service")
file(MAKE_DIRECTORY "${DEVPLACE_STAGING_DIR}")
file(WRITE "${staged}" "${unit}")

# file(INSTALL) prefixes $DESTDIR and records the files in install_manifest.txt.
file(INSTALL "${staged}" DESTINATION "${CMAKE_INSTALL_PREFIX}/lib/systemd/system" RENAME devplaced.service
  FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
file(REMOVE "${staged}")
file(INSTALL "${DEVPLACE_FLAGS_SOURCE}"
  DESTINATION "${etc_dir}" FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
