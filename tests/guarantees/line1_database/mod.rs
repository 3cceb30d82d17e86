//! Line 1, the order database: the unique key decides when everything before it is off; stock
//! is never oversold; a state never goes back; a finished record is never finalized FAILED while
//! its order can still be created; what retention removes, and what it keeps.
mod db_layer;
mod finalize_race;
mod foundation;
mod retention;
