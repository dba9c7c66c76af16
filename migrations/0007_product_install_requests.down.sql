DROP TABLE kb.product_install_requests;
