//! SASS facts from `cuobjdump -sass`: counts of the instructions that tell whether a
//! kernel uses the fast paths (HGMMA, TMA, 128-bit loads) or spills.
