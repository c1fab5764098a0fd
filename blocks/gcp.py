"""Create the GCP credentials block Falcon loads (FALCON_GCP_CREDENTIALS_BLOCK=falcon-gcp).

An empty GcpCredentials block means Application Default Credentials, i.e. Workload Identity on
GKE: no key is ever stored. Run once per Prefect server: `python blocks/gcp.py`.
"""

from prefect_gcp import GcpCredentials

if __name__ == "__main__":
    GcpCredentials().save("falcon-gcp", overwrite=True)
    print("saved GcpCredentials block 'falcon-gcp' (ADC / Workload Identity)")
