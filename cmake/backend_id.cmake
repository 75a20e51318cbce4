# Writes BACKEND_ID_OUT: a header defining ORDO_LLVM_BACKEND_ID, the SHA-256 of the LLVM
# backend's sources. It is part of every disk-cache key, so editing the lowering or the pass
# pipeline can never load machine code that an older build produced from the same IR.
set(text "")
string(REPLACE "|" ";" BACKEND_SOURCES "${BACKEND_SOURCES}")
foreach(f ${BACKEND_SOURCES})
  file(READ ${f} content)
  string(APPEND text "${content}")
endforeach()
string(SHA256 id "${text}")
file(WRITE ${BACKEND_ID_OUT}.tmp "#define ORDO_LLVM_BACKEND_ID \"${id}\"\n")
file(COPY_FILE ${BACKEND_ID_OUT}.tmp ${BACKEND_ID_OUT} ONLY_IF_DIFFERENT)
