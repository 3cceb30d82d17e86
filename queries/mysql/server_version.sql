SELECT CAST(CONCAT(@@version_comment, ' ', VERSION()) AS CHAR)
