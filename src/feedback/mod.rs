//! Feedback for the optimize and debug stages: the compile stage's ptxas report and SASS
//! facts turned into concrete hints ([`static_facts`]), Nsight Compute profiles
//! ([`ncu`]), the roofline placement ([`roofline`]), and the selection of the few
//! findings a prompt should carry ([`guidance`]), assembled into one [`profile::Profile`]
//! that `cutesmith profile` prints in full and the optimize prompt carries in short.

pub mod guidance;
pub mod ncu;
pub mod profile;
pub mod roofline;
pub mod static_facts;
