-- Before order_create_routine: MySQL has no CREATE OR REPLACE PROCEDURE (MariaDB has), so
-- `idemguard migrate` drops the old procedure first, under its migration lock.
DROP PROCEDURE IF EXISTS {{order_record}}_create
